package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/enginecheck"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/live"
	"github.com/offload-dev/offload/tunnel/record"
)

// Handshake outcomes, the label of offload_handshakes_total.
const (
	hsOK = iota
	hsAuth
	hsSuite
	hsVersion
	hsProtocol
	hsTimeout
	hsDropped // evicted from its handshake slot by a newer connection
	hsOther   // I/O errors and the like
	hsReplay  // a replayed first flight, refused by the replay cache
	hsBusy    // a client with the PSK refused at max_links
	hsRefused // no handshake slot could be freed for a new connection
	numHandshakeResults
)

var handshakeResultNames = [numHandshakeResults]string{"ok", "auth", "suite", "version", "protocol", "timeout", "dropped", "error", "replay", "busy", "refused"}

// handshakeResult classifies a handshake error.
func handshakeResult(err error) int {
	switch {
	case err == nil:
		return hsOK
	case errors.Is(err, handshake.ErrTimeout):
		// Before the others: a peer that stalls mid-message is a
		// timeout, though the error also says where it stalled.
		return hsTimeout
	case errors.Is(err, handshake.ErrAuth):
		return hsAuth
	case errors.Is(err, handshake.ErrReplay):
		return hsReplay
	case errors.Is(err, handshake.ErrBusy):
		return hsBusy
	case errors.Is(err, handshake.ErrSuiteMismatch):
		return hsSuite
	case errors.Is(err, handshake.ErrVersion):
		return hsVersion
	case errors.Is(err, handshake.ErrProtocol):
		return hsProtocol
	}
	return hsOther
}

// Stream outcomes, the label of offload_streams_total.
const (
	streamOK      = iota // both directions completed
	streamAborted        // ended with an error
	streamRefused        // never started: unknown service, dial failed, busy, link down
	numStreamResults
)

var streamResultNames = [numStreamResults]string{"ok", "aborted", "refused"}

// counters are a server's or client's own counters, next to the record
// layer's Stats; the status line and the metrics read both.
type counters struct {
	hybrid     record.HandedCounter // the policy, if it is hybrid's
	guard      *enginecheck.Guard   // the engine checks; nil in tests of counters alone
	role       string               // "server" or "client"
	engines    []string
	stats      *record.Stats
	handshakes [numHandshakeResults]atomic.Uint64
	streams    [numStreamResults]atomic.Uint64
	active     atomic.Int64 // open streams
	links      atomic.Int64 // server: links up; client: 1 while the link is up
	// linksReplaced counts a server's links closed for a newer link of
	// the same client (max_links_per_client).
	linksReplaced atomic.Uint64
	redials       atomic.Uint64
	// resumes counts sessions resumed on a new link and resumptions
	// refused (resumable.go).
	resumes    [2]atomic.Uint64
	linkErrors atomic.Uint64 // links that ended with a record-layer error
	// backlogResets counts new streams the sessions refused with an RST
	// and streams reset for overrunning link_buffer (tunnel/mux).
	backlogResets muxResets

	live    *live.View     // traffic, links and rates (tunnel/live)
	limits  func() []limit // the caps in force, as offload_limit gauges
	pending func() int     // server: handshakes in progress
}

func (c *counters) limitsNow() []limit {
	if c.limits == nil {
		return nil
	}
	return c.limits()
}

// limit is one configured cap, exported so that a dashboard can put the
// counters next to what they are counted against.
type limit struct {
	name  string
	value int
}

func newCounters(role string, engines []engine.Engine, stats *record.Stats, policy record.Policy) *counters {
	if stats == nil {
		stats = new(record.Stats)
	}
	c := &counters{role: role, stats: stats, live: live.NewView()}
	c.hybrid, _ = policy.(record.HandedCounter)
	for _, e := range engines {
		c.engines = append(c.engines, e.Name())
	}
	return c
}

// writePrometheus writes every counter in the Prometheus text format.
func (c *counters) writePrometheus(w io.Writer) {
	for i, name := range handshakeResultNames {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_handshakes_total{role=%q,result=%q}`, c.role, name), c.handshakes[i].Load())
	}
	for i, name := range streamResultNames {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_streams_total{role=%q,result=%q}`, c.role, name), c.streams[i].Load())
	}
	metrics.WriteGaugeUint64(w, fmt.Sprintf(`offload_streams_active{role=%q}`, c.role), uint64(max(c.active.Load(), 0)))
	if c.role == "client" {
		metrics.WriteGaugeUint64(w, `offload_link_up`, uint64(max(c.links.Load(), 0)))
		metrics.WriteCounterUint64(w, `offload_redials_total`, c.redials.Load())
	} else {
		metrics.WriteGaugeUint64(w, `offload_links_active`, uint64(max(c.links.Load(), 0)))
		metrics.WriteCounterUint64(w, `offload_links_replaced_total`, c.linksReplaced.Load())
	}
	for i, name := range [2]string{"resumed", "refused"} {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_resumptions_total{role=%q,result=%q}`, c.role, name), c.resumes[i].Load())
	}
	if c.pending != nil {
		metrics.WriteGaugeUint64(w, `offload_handshakes_pending`, uint64(c.pending()))
	}
	for _, l := range c.limitsNow() {
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`offload_limit{role=%q,name=%q}`, c.role, l.name), uint64(max(l.value, 0)))
	}
	c.live.WritePrometheus(w, c.role)
	metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_link_errors_total{role=%q}`, c.role), c.linkErrors.Load())
	metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_streams_reset_total{role=%q}`, c.role), c.backlogResets.Load())
	metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_auth_failures_total{role=%q}`, c.role), c.stats.AuthFailures.Load())
	for _, dir := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_rekeys_total{role=%q,dir=%q}`, c.role, dir), c.stats.Rekeys[dir].Load())
	}
	for i, eng := range c.engines {
		label := metrics.Label(eng)
		for _, dir := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
			metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_frames_total{engine=%s,dir=%q}`, label, dir), c.stats.Frames[dir][i].Load())
			metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_bytes_total{engine=%s,dir=%q}`, label, dir), c.stats.Bytes[dir][i].Load())
		}
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_engine_fallbacks_total{engine=%s}`, label), c.stats.Fallbacks[i].Load())
	}
	if c.hybrid != nil {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_hybrid_handed_total{role=%q}`, c.role), c.hybrid.HandedToCPU())
	}
	if g := c.guard; g != nil {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_engine_check_rounds_total{role=%q}`, c.role), g.Rounds.Load())
		for i, eng := range c.engines {
			label := metrics.Label(eng)
			checked, mismatches := g.VerifyCounts(i)
			metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_engine_check_failures_total{role=%q,engine=%s,check=%q}`, c.role, label, enginecheck.KAT), g.KATFailures[i].Load())
			metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_engine_check_failures_total{role=%q,engine=%s,check=%q}`, c.role, label, enginecheck.Verify), mismatches)
			metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_engine_check_failures_total{role=%q,engine=%s,check=%q}`, c.role, label, enginecheck.Stall), g.Stalls(i))
			metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_engine_verified_frames_total{role=%q,engine=%s}`, c.role, label), checked)
			out := uint64(0)
			if g.IsOut(i) {
				out = 1
			}
			metrics.WriteGaugeUint64(w, fmt.Sprintf(`offload_engine_out{role=%q,engine=%s}`, c.role, label), out)
		}
	}
}

// engineStats renders the per-engine counters in the status line.
type engineStats struct{ c *counters }

func (e engineStats) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	for i, name := range e.c.engines {
		err := enc.AddObject(name, zapcore.ObjectMarshalerFunc(func(enc zapcore.ObjectEncoder) error {
			st := e.c.stats
			for _, dir := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
				enc.AddUint64(dir.String()+"_frames", st.Frames[dir][i].Load())
				enc.AddUint64(dir.String()+"_bytes", st.Bytes[dir][i].Load())
			}
			enc.AddUint64("fallbacks", st.Fallbacks[i].Load())
			if g := e.c.guard; g != nil {
				_, mismatches := g.VerifyCounts(i)
				enc.AddUint64("check_failures", g.KATFailures[i].Load()+mismatches+g.Stalls(i))
				enc.AddBool("out", g.IsOut(i))
			}
			return nil
		}))
		if err != nil {
			return err
		}
	}
	return nil
}

// logStatus logs one status line at info.
func (c *counters) logStatus(log *zap.Logger) {
	fields := []zap.Field{
		zap.Int64("streams_active", c.active.Load()),
		zap.Uint64("streams_ok", c.streams[streamOK].Load()),
		zap.Uint64("streams_aborted", c.streams[streamAborted].Load()),
		zap.Uint64("streams_refused", c.streams[streamRefused].Load()),
	}
	if c.role == "client" {
		fields = append(fields, zap.Bool("link_up", c.links.Load() > 0), zap.Uint64("redials", c.redials.Load()))
	} else {
		fields = append(fields, zap.Int64("links", c.links.Load()),
			zap.Uint64("handshakes_ok", c.handshakes[hsOK].Load()),
			zap.Uint64("handshakes_failed", c.handshakesFailed()))
	}
	fields = append(fields, c.live.LogFields()...)
	fields = append(fields,
		zap.Uint64("auth_failures", c.stats.AuthFailures.Load()),
		zap.Uint64("rekeys_sent", c.stats.Rekeys[engine.Encrypt].Load()),
		zap.Uint64("rekeys_received", c.stats.Rekeys[engine.Decrypt].Load()),
		zap.Object("engines", engineStats{c}))
	if c.hybrid != nil {
		fields = append(fields, zap.Uint64("hybrid_handed_to_cpu", c.hybrid.HandedToCPU()))
	}
	log.Info("status", fields...)
}

func (c *counters) handshakesFailed() uint64 {
	var n uint64
	for i := hsOK + 1; i < numHandshakeResults; i++ {
		n += c.handshakes[i].Load()
	}
	return n
}

// statusLoop logs a status line every interval until ctx ends, and
// samples the traffic for its rates meanwhile (tunnel/live).
func (c *counters) statusLoop(ctx context.Context, interval time.Duration, log *zap.Logger) {
	c.live.Start()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		every(ctx, live.RateTick, c.live.Sample)
	}()
	every(ctx, interval, func() { c.logStatus(log) })
	<-sampled
}

// every runs fn every interval until ctx ends; 0 means never.
func every(ctx context.Context, interval time.Duration, fn func()) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
