package main

import (
	"context"
	"io"
	"net"
	"strconv"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/tunnel"
)

func init() {
	register(&command{
		Name:  "client",
		Short: "run the tunnel's client end: listen locally, carry connections to the server",
		Usage: "-c FILE [-cpuprofile FILE]",
		Flags: configFlags("client config `FILE` (see examples/client.yaml)", runClient),
	})
}

func runClient(ctx context.Context, env *runEnv, file string) (int, error) {
	cfg, err := config.LoadClient(file)
	if err != nil {
		return 1, err
	}
	opt, log, err := endOptions(ctx, env, &cfg.Common)
	if err != nil {
		return 1, err
	}
	defer func() { _ = log.Sync() }()
	// closers close what was opened so far if the start fails; once
	// running, Run closes it all.
	var closers []io.Closer
	closeAll := func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
	forwards, lns, _, err := clientForwards(cfg, nil)
	if err != nil {
		return 1, err
	}
	for _, ln := range lns {
		closers = append(closers, ln)
	}
	socks, err := listenSocks(cfg)
	if err != nil {
		closeAll()
		return 1, err
	}
	if socks != nil {
		closers = append(closers, socks.Listener)
	}
	udp, err := listenUDP(cfg)
	if err != nil {
		closeAll()
		return 1, err
	}
	for _, f := range udp {
		closers = append(closers, f.Conn)
	}
	cli, err := tunnel.NewClient(tunnel.ClientConfig{
		Options:     opt,
		Servers:     cfg.Servers,
		Forwards:    forwards,
		Socks:       socks,
		UDPForwards: udp,
		Reverse:     reverseForwards(cfg),
		RedialMin:   cfg.Redial.Min,
		RedialMax:   cfg.Redial.Max,
	})
	if err != nil {
		closeAll()
		return 1, err
	}
	stopMetrics, err := startMetrics(ctx, &cfg.Common, cli.RegisterMetrics, cli.Healthy, log)
	if err != nil {
		closeAll()
		return 1, err
	}
	r := &clientReloader{cli: cli, start: cfg, file: file, lns: lns, log: log}
	stopHangup := onHangup(ctx, func() { logReload(log, file, r.reload) })
	err = cli.Run(ctx)
	stopHangup()
	stopMetrics()
	if err != nil {
		return 1, err
	}
	log.Info("stopped")
	return 0, nil
}

// forwardField is the config field path of forward i.
func forwardField(i int) string { return "forwards[" + strconv.Itoa(i) + "]" }

// listenSocks opens the SOCKS5 listener and reads its users file, if the
// config has socks.
func listenSocks(cfg *config.Client) (*tunnel.Socks, error) {
	if cfg.Socks == "" {
		return nil, nil
	}
	users, err := cfg.LoadSocksUsers()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Socks)
	if err != nil {
		return nil, cfg.FieldError("socks", err)
	}
	return &tunnel.Socks{Listener: ln, Users: users}, nil
}

// listenUDP opens the UDP forwards' sockets.
func listenUDP(cfg *config.Client) ([]tunnel.UDPForward, error) {
	var out []tunnel.UDPForward
	for i, f := range cfg.UDPForwards {
		field := "udp_forwards[" + strconv.Itoa(i) + "]"
		a, err := net.ResolveUDPAddr("udp", f.Listen)
		var conn *net.UDPConn
		if err == nil {
			conn, err = net.ListenUDP("udp", a)
		}
		if err != nil {
			for _, o := range out {
				_ = o.Conn.Close()
			}
			return nil, cfg.FieldError(field, err)
		}
		out = append(out, tunnel.UDPForward{Conn: conn, Service: f.Service, IdleTimeout: f.IdleTimeout, MaxFlows: f.MaxFlows})
	}
	return out, nil
}

func reverseForwards(cfg *config.Client) []tunnel.Reverse {
	out := make([]tunnel.Reverse, len(cfg.Reverse))
	for i, r := range cfg.Reverse {
		out[i] = tunnel.Reverse{Listen: r.Listen, Target: r.Target}
	}
	return out
}
