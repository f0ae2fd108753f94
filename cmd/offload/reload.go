package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/tunnel"
)

// Reload on SIGHUP. Each end re-reads its config file and applies what can
// change at run time through the same function that applied it at start
// (serverConfig, clientSettings), so whatever those map reloads too; the
// settings that can't are compared with the running ones (config.Changed)
// and each that differs is logged as needing a restart, its old value kept.
// A config that does not load, or that the tunnel refuses, changes nothing:
// the error is logged (file:line: field: problem, as at start) and the old
// config keeps running.

// Settings a reload applies; every other one needs a restart.
var (
	serverLive = []string{"services", "clients", "key_file", "socks_allow", "udp_services", "reverse_allow", "max_links", "max_links_per_client"}
	clientLive = []string{"forwards", "key_file", "socks", "socks_users_file", "udp_forwards", "reverse"}
)

// onHangup calls reload on every SIGHUP until ctx ends; it returns when
// the signal handling has stopped.
func onHangup(ctx context.Context, reload func()) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				reload()
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		<-done
	}
}

// serverConfig maps a server config to the tunnel's, at start and at every
// reload: opt are the tunnel options made at start (engines and all) and
// key the top-level key, if the config has one; clients' keys are read
// here.
func serverConfig(cfg *config.Server, opt tunnel.Options, key []byte) (tunnel.ServerConfig, error) {
	opt.PSK = key
	sc := tunnel.ServerConfig{
		Options:                opt,
		Services:               cfg.Services,
		MaxLinks:               cfg.MaxLinks,
		MaxLinksPerClient:      cfg.MaxLinksPerClient,
		MaxHandshakes:          cfg.MaxHandshakes,
		MaxHandshakesPerSource: cfg.MaxHandshakesPerSource,
		ProxyProtocol:          proxyProtocol(cfg),
	}
	rules, err := tunnel.NewRules(cfg.SocksAllow, cfg.UDPServices, cfg.ReverseAllow)
	if err != nil {
		return sc, err
	}
	sc.Rules = rules
	if len(cfg.Clients) == 0 {
		return sc, nil
	}
	keys, err := cfg.LoadClientKeys()
	if err != nil {
		return sc, err
	}
	for _, c := range keys {
		var acc tunnel.Access
		if acc.Rules, err = tunnel.NewRules(c.SocksAllow, nil, c.ReverseAllow); err != nil {
			return sc, fmt.Errorf("client %s: %w", c.Name, err)
		}
		for _, s := range c.Services {
			if s == config.AllServices {
				acc.AllServices = true
				continue
			}
			acc.Services = append(acc.Services, s)
		}
		sc.Clients = append(sc.Clients, tunnel.ServerClient{Name: c.Name, Keys: c.Keys, Access: acc})
	}
	return sc, nil
}

// loadKey reads the top-level key file, if the config has one (a server
// with clients has none).
func loadKey(c *config.Common) ([]byte, error) {
	if c.KeyFile == "" {
		return nil, nil
	}
	return c.LoadKey()
}

// reloadServer re-reads file and applies it to srv; start is the config
// the server started with (what the restart-only settings still are).
func reloadServer(srv *tunnel.Server, start *config.Server, opt tunnel.Options, file string, log *zap.Logger) error {
	next, err := config.LoadServer(file)
	if err != nil {
		return err
	}
	key, err := loadKey(&next.Common)
	if err != nil {
		return err
	}
	sc, err := serverConfig(next, opt, key)
	if err != nil {
		return err
	}
	if err := srv.Reload(sc); err != nil {
		return err
	}
	needsRestart(log, config.Changed(start, next, serverLive...))
	return nil
}

func needsRestart(log *zap.Logger, fields []string) {
	for _, f := range fields {
		log.Warn("setting needs a restart; the running value is kept", zap.String("setting", f))
	}
}

// clientSockets are a running client's listeners (forwards' and SOCKS's)
// and UDP sockets, by listen address as written in the config: a reload
// that keeps an address keeps its socket, and what runs on it.
type clientSockets struct {
	tcp map[string]net.Listener
	udp map[string]*net.UDPConn
}

// close closes every socket in s.
func (s *clientSockets) close() {
	for _, ln := range s.tcp {
		_ = ln.Close()
	}
	for _, c := range s.udp {
		_ = c.Close()
	}
}

// clientSettings maps what a reload may change of a client config to the
// tunnel's, at start (have is empty) and at every reload: it reads the
// key and the SOCKS users files and opens the sockets of cfg's forwards,
// SOCKS listener and UDP forwards, reusing those in have. It returns the
// sockets of cfg (next) and those it opened, which the caller closes if
// the tunnel refuses the config. On an error it closes what it opened
// and returns an *config.Error at the field.
func clientSettings(cfg *config.Client, have clientSockets) (live tunnel.ClientLive, next, opened clientSockets, err error) {
	next = clientSockets{tcp: map[string]net.Listener{}, udp: map[string]*net.UDPConn{}}
	opened = clientSockets{tcp: map[string]net.Listener{}, udp: map[string]*net.UDPConn{}}
	fail := func(err error) (tunnel.ClientLive, clientSockets, clientSockets, error) {
		opened.close()
		return tunnel.ClientLive{}, clientSockets{}, clientSockets{}, err
	}
	if live.PSK, err = cfg.LoadKey(); err != nil {
		return fail(err)
	}
	listen := func(addr string) (net.Listener, error) {
		if ln, ok := have.tcp[addr]; ok {
			next.tcp[addr] = ln
			return ln, nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		opened.tcp[addr], next.tcp[addr] = ln, ln
		return ln, nil
	}
	for i, f := range cfg.Forwards {
		ln, err := listen(f.Listen)
		if err != nil {
			return fail(cfg.FieldError(forwardField(i), err))
		}
		live.Forwards = append(live.Forwards, tunnel.Forward{Listener: ln, Service: f.Service})
	}
	if cfg.Socks != "" {
		// The users file is read before the listener opens: a bad one
		// (its mode, a line) must not leave a new listener behind.
		users, err := cfg.LoadSocksUsers()
		if err != nil {
			return fail(err)
		}
		ln, err := listen(cfg.Socks)
		if err != nil {
			return fail(cfg.FieldError("socks", err))
		}
		live.Socks = &tunnel.Socks{Listener: ln, Users: users}
	}
	for i, f := range cfg.UDPForwards {
		conn, ok := have.udp[f.Listen]
		if !ok {
			a, err := net.ResolveUDPAddr("udp", f.Listen)
			if err == nil {
				conn, err = net.ListenUDP("udp", a)
			}
			if err != nil {
				return fail(cfg.FieldError("udp_forwards["+strconv.Itoa(i)+"]", err))
			}
			opened.udp[f.Listen] = conn
		}
		next.udp[f.Listen] = conn
		live.UDPForwards = append(live.UDPForwards, tunnel.UDPForward{Conn: conn, Service: f.Service, IdleTimeout: f.IdleTimeout, MaxFlows: f.MaxFlows})
	}
	for _, r := range cfg.Reverse {
		live.Reverse = append(live.Reverse, tunnel.Reverse{Listen: r.Listen, Target: r.Target})
	}
	return live, next, opened, nil
}

// clientReloader reloads a running client from its config file.
type clientReloader struct {
	cli   *tunnel.Client
	start *config.Client
	file  string
	socks clientSockets // the running config's
	log   *zap.Logger
}

func (r *clientReloader) reload() error {
	next, err := config.LoadClient(r.file)
	if err != nil {
		return err
	}
	live, socks, opened, err := clientSettings(next, r.socks)
	if err != nil {
		return err
	}
	if err := r.cli.Reload(live); err != nil {
		opened.close()
		return err
	}
	r.socks = socks // the tunnel closed the sockets left out
	needsRestart(r.log, config.Changed(r.start, next, clientLive...))
	return nil
}

// logReload runs a reload and logs its outcome: a refused config with
// every problem (one field each), and that the old one keeps running.
func logReload(log *zap.Logger, file string, reload func() error) {
	log.Info("SIGHUP: reloading", zap.String("config", file))
	err := reload()
	if err == nil {
		return
	}
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			log.Error("reload refused; the running config is kept", zap.String("problem", e.Error()))
		}
		return
	}
	log.Error("reload refused; the running config is kept", zap.Error(err))
}
