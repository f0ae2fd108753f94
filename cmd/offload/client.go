package main

import (
	"context"
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
	ctl, ctlWarn, err := listenControl(&cfg.Common)
	if err != nil {
		return 1, err
	}
	defer closeControl(ctl)
	// clientSettings reads the key file, as every reload does: once.
	live, socks, _, err := clientSettings(cfg, clientSockets{})
	if err != nil {
		return 1, err
	}
	opt, log, err := endOptions(ctx, env, &cfg.Common, cfg.TunnelOptions(), live.PSK)
	if err != nil {
		socks.close()
		return 1, err
	}
	defer func() { _ = log.Sync() }()
	cli, err := tunnel.NewClient(tunnel.ClientConfig{
		Options:     opt,
		Servers:     cfg.Servers,
		Forwards:    live.Forwards,
		Socks:       live.Socks,
		UDPForwards: live.UDPForwards,
		Reverse:     live.Reverse,
		RedialMin:   cfg.Redial.Min,
		RedialMax:   cfg.Redial.Max,
	})
	if err != nil {
		socks.close()
		return 1, err
	}
	status := endStatus(cli.Status, &cfg.Common, "")
	defer serveControl(ctx, ctl, ctlWarn, status, log)()
	stopMetrics, err := startMetrics(ctx, &cfg.Common, cli.RegisterMetrics, cli.Healthy, status, log)
	if err != nil {
		socks.close()
		return 1, err
	}
	r := &clientReloader{cli: cli, start: cfg, file: file, socks: socks, log: log}
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
