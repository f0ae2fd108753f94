package main

// How bench measures one row once: a tunnel (both ends in-process, or the
// client against a server), a load through it, and what each engine did.
// Which rows run when, and how the runs become the report, is
// measure/method's.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/measure/bench"
	"github.com/offload-dev/offload/measure/method"
	"github.com/offload-dev/offload/tunnel"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// benchRunner runs one measurement at a time.
type benchRunner struct {
	o        benchOpts
	env      *runEnv
	log      *zap.Logger
	suite    suite.Suite
	psk      []byte
	maxFrame int
	write    int
	window   int
	bytes    int64
	sinkAddr string // in-process only
}

// end is one tunnel end whose record counters a run reads; fallbacks0
// are its Fallbacks when the run began (the client's Stats outlive a run).
type end struct {
	name       string
	stats      *record.Stats
	fallbacks0 [record.MaxEngines]uint64
}

// run measures one policy with n streams on a fresh link: the tunnel is
// started, warmed up with one small verified stream (handshake and link
// up are not part of the figure), measured, and stopped.
//
// r is a named result so that the deferred stop can still set its Error.
func (b *benchRunner) run(ctx context.Context, spec string, set engineSet, n int) (r benchRun) {
	engines, policy := set.engines, set.policy
	r = benchRun{Policy: spec, Streams: n}
	var refusals *refusalRecorder // remote only: the server's answers to refused streams
	// The defaults but for no keepalives or status lines; the drain
	// timeout (default 10s) lets the load's last streams, which may still
	// be closing inside the tunnel when it stops, end instead of being cut.
	opt := tunnel.DefaultOptions()
	opt.Suite, opt.PSK, opt.Engines, opt.Policy, opt.Logger = b.suite, b.psk, engines, policy, b.log
	opt.MaxFrame, opt.Keepalive, opt.StatusInterval = b.maxFrame, 0, 0
	if b.window > 0 {
		opt.YamuxWindow = b.window
	}
	// The bench measures throughput, not the link budget: give the link
	// room for all n streams (link_buffer caps them otherwise).
	opt.LinkBuffer = max(opt.LinkBuffer, tunnel.LinkBufferFor(n, opt.YamuxWindow))
	tctx, stop := context.WithCancel(ctx)
	var waits []chan error
	warmedUp := false
	defer func() {
		stop()
		for _, w := range waits {
			if err := waitEnd(w); err != nil && r.Error == "" {
				r.Error = err.Error()
			}
		}
		// The client has stopped, so it has logged why the server
		// refused the warm-up stream, if it did: say that, not the
		// reset the load saw.
		if refusal := refusals.lastOrNil(); !warmedUp && refusal != nil {
			r.Error = remoteRefusal(b.o.server, b.o.service, refusal).Error()
		}
	}()
	var ends []end
	server := b.o.server
	if server == "" {
		srv, err := tunnel.NewServer(tunnel.ServerConfig{Options: opt, Services: map[string]string{benchService: b.sinkAddr}})
		if err != nil {
			r.Error = err.Error()
			return r
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			r.Error = err.Error()
			return r
		}
		server = ln.Addr().String()
		w := make(chan error, 1)
		go func() { w <- srv.Serve(tctx, ln) }()
		waits = append(waits, w)
		ends = append(ends, end{name: "server", stats: srv.Stats()})
	}
	fwd, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.Error = err.Error()
		return r
	}
	service := benchService
	copt := opt
	if b.o.server != "" {
		service = b.o.service
		refusals = new(refusalRecorder)
		copt.Logger = zap.New(zapcore.NewTee(b.log.Core(), refusals))
	}
	// The client counts into the Stats the policy watches, so that an
	// engine whose frames keep failing is taken out here as in a start;
	// it is the end a bench runs in both modes (the in-process server,
	// which shares the policy, keeps counters of its own, so the report
	// still tells the ends apart).
	set.apply(&copt)
	cli, err := tunnel.NewClient(tunnel.ClientConfig{Options: copt, Server: server, Forwards: []tunnel.Forward{{Listener: fwd, Service: service}}})
	if err != nil {
		_ = fwd.Close()
		r.Error = err.Error()
		return r
	}
	w := make(chan error, 1)
	go func() { w <- cli.Run(tctx) }()
	waits = append(waits, w)
	ce := end{name: "client", stats: cli.Stats()}
	for k := range ce.fallbacks0 {
		ce.fallbacks0[k] = ce.stats.Fallbacks[k].Load()
	}
	ends = append(ends, ce)

	load := bench.Load{Addr: fwd.Addr().String(), Streams: 1, Bytes: 1, WriteSize: b.write, AllowUnverified: b.o.unverified}
	if _, err := bench.Run(tctx, load); err != nil {
		r.Error = fmt.Sprintf("warm-up stream: %v", err)
		return r
	}
	warmedUp = true
	before := snapshot(ends)
	hp, _ := policy.(record.HandedCounter)
	var handed0 uint64
	if hp != nil {
		handed0 = hp.HandedToCPU()
	}
	var irq0 engine.Interrupts
	if b.o.irq {
		if irq0, err = engine.ReadInterrupts(); err != nil {
			r.Error = fmt.Sprintf("-irq: %v", err)
			return r
		}
	}
	load.Streams, load.Bytes = n, b.bytes
	if b.o.seconds > 0 {
		load.Duration = time.Duration(b.o.seconds * float64(time.Second))
	}
	var sent atomic.Int64
	load.Sent = &sent
	stopProgress := progressDots(b.env.Stderr, &sent)
	res, err := bench.Run(tctx, load)
	stopProgress()
	if b.o.irq {
		if irq1, ierr := engine.ReadInterrupts(); ierr == nil {
			r.IRQ = irqDelta(irq0, irq1)
		}
	}
	r.Bytes, r.Seconds, r.MBps, r.CPUPerGB, r.Verified = res.Bytes, res.Elapsed.Seconds(), res.MBps(), res.CPUPerGB(), res.Verified
	r.Engines = engineCounts(engines, b.suite.Cipher, ends, before, snapshot(ends))
	if hp != nil {
		r.HandedToCPU = hp.HandedToCPU() - handed0
	}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// waitEnd waits for a tunnel end to stop after its context was cancelled.
func waitEnd(w chan error) error {
	select {
	case err := <-w:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("a tunnel end did not stop within 30s")
	}
}

// progressDots prints the bytes sent so far to w once a second while a
// run goes on; the returned func stops it.
func progressDots(w io.Writer, sent *atomic.Int64) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "%s.. ", method.Size(sent.Load()))
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// counts are the record counters of every end: [end][dir][engine].
type counts [][2][record.MaxEngines]frameCount

func snapshot(ends []end) counts {
	c := make(counts, len(ends))
	for i, e := range ends {
		for d := range 2 {
			for k := range record.MaxEngines {
				c[i][d][k] = frameCount{e.stats.Frames[d][k].Load(), e.stats.Bytes[d][k].Load()}
			}
		}
	}
	return c
}

// engineCounts is what each engine did between two snapshots.
func engineCounts(engines []engine.Engine, c engine.Cipher, ends []end, before, after counts) []benchEngine {
	out := make([]benchEngine, 0, len(engines))
	for k, e := range engines {
		be := benchEngine{Engine: e.Name(), By: map[string]frameCount{}}
		if d, err := e.Driver(c); err == nil {
			be.Driver = d.String()
		}
		for i, en := range ends {
			for d := range 2 {
				f := after[i][d][k].Frames - before[i][d][k].Frames
				by := after[i][d][k].Bytes - before[i][d][k].Bytes
				be.Frames += f
				be.Bytes += by
				be.By[en.name+"/"+engine.Direction(d).String()] = frameCount{f, by}
			}
			be.Fallbacks += en.stats.Fallbacks[k].Load() - en.fallbacks0[k]
		}
		out = append(out, be)
	}
	return out
}

// measure runs a cell once, with its progress line on stderr.
// p is set up once for all the policy's runs.
func (b *benchRunner) measure(ctx context.Context, c *benchCell, p engineSet, t method.Turn) benchRun {
	fmt.Fprintf(b.env.Stderr, "bench: %s, %s%s: ", c.Name, plural(c.Streams, "stream"), repeatNote(t.N, t.Of))
	r := b.run(ctx, c.Name, p, c.Streams)
	if r.Error != "" {
		fmt.Fprintf(b.env.Stderr, "failed: %s\n", r.Error)
	} else {
		fmt.Fprintf(b.env.Stderr, "%s in %.2fs, %.1f MB/s\n", method.Size(r.Bytes), r.Seconds, r.MBps)
	}
	return r
}

func repeatNote(i, n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(" (run %d of %d)", i+1, n)
}
