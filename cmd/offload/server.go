package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/offload-dev/offload/internal/metrics"
	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/selector"
	"github.com/offload-dev/offload/tunnel"
	"github.com/offload-dev/offload/tunnel/exposition"
	"github.com/offload-dev/offload/tunnel/live"
	"github.com/offload-dev/offload/tunnel/metricsserver"
	"github.com/offload-dev/offload/tunnel/record"
)

func init() {
	register(&command{
		Name:  "server",
		Short: "run the tunnel's server end: accept clients, forward their streams to the services",
		Usage: "-c FILE [-cpuprofile FILE]",
		Flags: configFlags("server config `FILE` (see examples/server.yaml)", runServer),
	})
}

func runServer(ctx context.Context, env *runEnv, file string) (int, error) {
	cfg, err := config.LoadServer(file)
	if err != nil {
		return 1, err
	}
	ctl, ctlWarn, err := listenControl(&cfg.Common)
	if err != nil {
		return 1, err
	}
	defer closeControl(ctl)
	key, err := loadKey(&cfg.Common)
	if err != nil {
		return 1, err
	}
	opt, log, err := endOptions(ctx, env, &cfg.Common, cfg.TunnelOptions(), key)
	if err != nil {
		return 1, err
	}
	defer func() { _ = log.Sync() }()
	sc, err := serverConfig(cfg, opt, key)
	if err != nil {
		return 1, err
	}
	srv, err := tunnel.NewServer(sc)
	if err != nil {
		return 1, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return 1, cfg.FieldError("listen", err)
	}
	status := endStatus(srv.Status, &cfg.Common, cfg.Listen)
	defer serveControl(ctx, ctl, ctlWarn, status, log)()
	stopMetrics, err := startMetrics(ctx, &cfg.Common, srv.RegisterMetrics, srv.Healthy, status, log)
	if err != nil {
		_ = ln.Close()
		return 1, err
	}
	stopHangup := onHangup(ctx, func() {
		logReload(log, file, func() error { return reloadServer(srv, cfg, opt, file, log) })
	})
	err = srv.Serve(ctx, ln)
	stopHangup()
	stopMetrics()
	if err != nil {
		return 1, err
	}
	log.Info("stopped")
	return 0, nil
}

// endOptions is what server and client make of their config (its
// common part c and its tunnel options o, cfg.TunnelOptions()) and its key
// (read once, by the caller) before they start: the logger and the
// tunnel options. The caller syncs the logger.
func endOptions(ctx context.Context, env *runEnv, c *config.Common, o tunnel.Options, key []byte) (tunnel.Options, *zap.Logger, error) {
	log := newLogger(c.Log, env.Stderr)
	opt, err := tunnelOptions(ctx, c, o, key, log)
	if err != nil {
		_ = log.Sync()
		return tunnel.Options{}, nil, err
	}
	return opt, log, nil
}

// configFlags is the flag set of server and client: -c FILE, an optional
// -cpuprofile FILE and no arguments, then run with the file.
func configFlags(usage string, run func(context.Context, *runEnv, string) (int, error)) func(*flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
	return func(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
		file := fs.String("c", "", usage)
		profile := fs.String("cpuprofile", "", "write a CPU profile of this end, from start to exit, to `FILE` (for go tool pprof)")
		return func(ctx context.Context, env *runEnv, args []string) (int, error) {
			if len(args) != 0 || *file == "" {
				return 2, errUsage
			}
			stop, err := startCPUProfile(*profile, env.Stderr)
			if err != nil {
				return 1, err
			}
			defer stop()
			return run(ctx, env, *file)
		}
	}
}

// tunnelOptions completes the config's tunnel options o: the runtime's
// settings applied, the key, the logger and the engine set up here; one
// that can't serve the suite stops the start with its reason.
func tunnelOptions(ctx context.Context, c *config.Common, o tunnel.Options, key []byte, log *zap.Logger) (tunnel.Options, error) {
	applyMemoryLimit(c.MemoryLimit, log)
	applyMaxProcs(c.MaxProcs, log)
	set, err := openEngines(ctx, c, log)
	if err != nil {
		return tunnel.Options{}, err
	}
	opt := configOptions(o, key, log)
	set.apply(&opt)
	return opt, nil
}

// engineSet is what an engine spec becomes (selector.Engines) with the
// record.Stats its policy watches and the largest frame it was set up
// for: the links that use the engines must count into that Stats, or the
// rule that takes out an engine whose frames keep failing sees nothing,
// and must cut frames no larger than the profile covers. It is made in
// one place (openEngineSet) and handed to the tunnel whole (apply), by a
// start and by bench.
type engineSet struct {
	engines  []engine.Engine
	policy   record.Policy
	stats    *record.Stats
	maxFrame int
}

// openEngineSet sets up spec for cipher with o (its Stats made here);
// o.MaxFrame is the links' max_frame.
func openEngineSet(ctx context.Context, spec string, cipher engine.Cipher, o selector.EngineOptions) (engineSet, error) {
	o.Stats = new(record.Stats)
	engines, policy, err := engineSetup(ctx, spec, cipher, o)
	if err != nil {
		return engineSet{}, err
	}
	return engineSet{engines: engines, policy: policy, stats: o.Stats, maxFrame: o.MaxFrame}, nil
}

// engineSetup is what openEngineSet builds a set with: selector.Engines,
// and in tests a set with a fake engine (which no spec opens).
var engineSetup = selector.Engines

// apply gives the set to the tunnel's options.
func (s engineSet) apply(o *tunnel.Options) {
	o.Engines, o.Policy, o.Stats, o.MaxFrame = s.engines, s.policy, s.stats, s.maxFrame
}

// openEngines sets up the config's engine for its suite, as a start does
// and offload validate checks it: a named engine that is missing on this
// machine, or fails its known answers, is an error at the engine field.
func openEngines(ctx context.Context, c *config.Common, log *zap.Logger) (engineSet, error) {
	set, err := openEngineSet(ctx, c.Engine, c.Suite.Cipher, selector.EngineOptions{
		Logger: log.Named("engine"), MaxFrame: c.MaxFrame, Profile: c.Profile,
	})
	if err != nil {
		return engineSet{}, c.FieldError("engine", err)
	}
	return set, nil
}

// configOptions is a config's tunnel options (cfg.TunnelOptions(): the
// file's settings over tunnel.DefaultOptions) with the key and logger, all
// but the engines: start and offload validate share it, and validate runs
// the tunnel's own checks on it (Options.Check) with the key, so a config
// that validates also starts.
func configOptions(o tunnel.Options, key []byte, log *zap.Logger) tunnel.Options {
	o.PSK, o.Logger = key, log
	return o
}

// startMetrics serves Prometheus metrics, /healthz (health) and /status
// (status, for offload status) on the config's metrics address, if any,
// until the returned func is called, which stops it and waits. It
// outlives ctx on purpose: while an end drains after ctx ended, /healthz
// answers 503, so a load balancer stops sending it clients, instead of
// finding the port closed.
func startMetrics(ctx context.Context, c *config.Common, register func(*metrics.Set), health func() bool, status func() *live.Status, log *zap.Logger) (func(), error) {
	if c.Metrics == "" {
		return func() {}, nil
	}
	token, err := c.LoadMetricsToken()
	if err != nil {
		return nil, err
	}
	ln, err := metricsserver.Listen(ctx, c.Metrics)
	if err != nil {
		return nil, c.FieldError("metrics", err)
	}
	// config checked the address; a name such as localhost is checked
	// again here, as it resolved.
	if ta, ok := ln.Addr().(*net.TCPAddr); token == nil && (!ok || !ta.IP.IsLoopback()) {
		_ = ln.Close()
		return nil, c.FieldError("metrics", fmt.Errorf("%s listens on %v, not loopback; serving metrics beyond this host needs metrics_token_file", c.Metrics, ln.Addr()))
	}
	set := metrics.NewSet()
	register(set)
	set.RegisterMetricsWriter(buildInfo().WritePrometheus)
	set.RegisterMetricsWriter(metrics.WriteProcess)
	set.RegisterMetricsWriter(metrics.WriteGo)
	log.Info("metrics", zap.String("url", fmt.Sprintf("http://%s/metrics", ln.Addr())), zap.Bool("token", token != nil))
	done := make(chan struct{})
	mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(done)
		opt := metricsserver.Options{
			Metrics: func(w io.Writer) { exposition.Write(w, set) },
			Token:   token,
			Logger:  log,
			Health:  health,
		}
		if status != nil {
			opt.Status = func() any { return status() }
		}
		if err := metricsserver.Serve(mctx, ln, opt); err != nil {
			log.Error("metrics server failed", zap.Error(err))
		}
	}()
	return func() { stop(); <-done }, nil
}

// buildInfo is offload_build_info's labels for this binary.
func buildInfo() exposition.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	vcs, _ := vcsOf(bi)
	return exposition.BuildInfo{Version: version(), Revision: vcs.revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

// applyMemoryLimit sets the runtime's soft memory limit from the config's
// memory_limit, unless GOMEMLIMIT in the environment already set one (the
// systemd units and the procd script may).
func applyMemoryLimit(limit int, log *zap.Logger) {
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		log.Info("memory limit from the environment", zap.String("GOMEMLIMIT", env))
		return
	}
	if limit > 0 {
		debug.SetMemoryLimit(int64(limit))
		log.Info("memory limit", zap.Int("bytes", limit))
	}
}

// applyMaxProcs sets the runtime's GOMAXPROCS from the config's
// max_procs, unless GOMAXPROCS in the environment already set it; 0 leaves
// the runtime's own choice.
func applyMaxProcs(n int, log *zap.Logger) {
	if env := os.Getenv("GOMAXPROCS"); env != "" {
		if n > 0 {
			log.Info("max_procs: GOMAXPROCS from the environment wins", zap.String("GOMAXPROCS", env), zap.Int("max_procs", n))
		}
		return
	}
	if n > 0 {
		runtime.GOMAXPROCS(n)
		log.Info("max procs", zap.Int("procs", n))
	}
}

// proxyProtocol maps proxy_protocol and proxy_protocol_from to the
// tunnel's setting; nil when it is off.
func proxyProtocol(cfg *config.Server) *tunnel.ProxyProtocol {
	if !cfg.ProxyProtocol {
		return nil
	}
	return &tunnel.ProxyProtocol{From: cfg.ProxyProtocolFrom}
}
