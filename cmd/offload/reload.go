package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/tunnel"
)

// Reload on SIGHUP. Each end re-reads its config file and applies what can
// change at run time through the same function that applied it at start
// (serverConfig, clientForwards), so whatever those map reloads too; the
// settings that can't are compared with the running ones (config.Changed)
// and each that differs is logged as needing a restart, its old value kept.
// A config that does not load, or that the tunnel refuses, changes nothing:
// the error is logged (file:line: field: problem, as at start) and the old
// config keeps running.

// Settings a reload applies; every other one needs a restart.
var (
	serverLive = []string{"services", "clients", "key_file", "socks_allow", "udp_services", "reverse_allow"}
	clientLive = []string{"forwards", "key_file"}
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

// clientForwards opens the listeners of cfg's forwards, at start and at
// every reload, reusing those in have (by listen address as written). On
// an error it closes what it opened and returns an *config.Error at the
// forward.
func clientForwards(cfg *config.Client, have map[string]net.Listener) (fwds []tunnel.Forward, lns map[string]net.Listener, opened []net.Listener, err error) {
	lns = map[string]net.Listener{}
	for i, f := range cfg.Forwards {
		ln, ok := have[f.Listen]
		if !ok {
			ln, err = net.Listen("tcp", f.Listen)
			if err != nil {
				for _, o := range opened {
					_ = o.Close()
				}
				return nil, nil, nil, cfg.FieldError(forwardField(i), err)
			}
			opened = append(opened, ln)
		}
		lns[f.Listen] = ln
		fwds = append(fwds, tunnel.Forward{Listener: ln, Service: f.Service})
	}
	return fwds, lns, opened, nil
}

// clientReloader reloads a running client from its config file.
type clientReloader struct {
	cli   *tunnel.Client
	start *config.Client
	file  string
	lns   map[string]net.Listener // the running forwards' listeners, by listen address
	log   *zap.Logger
}

func (r *clientReloader) reload() error {
	next, err := config.LoadClient(r.file)
	if err != nil {
		return err
	}
	key, err := next.LoadKey()
	if err != nil {
		return err
	}
	fwds, lns, opened, err := clientForwards(next, r.lns)
	if err != nil {
		return err
	}
	if err := r.cli.Reload(key, fwds); err != nil {
		for _, o := range opened {
			_ = o.Close()
		}
		return err
	}
	r.lns = lns // the tunnel closed the listeners left out
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
