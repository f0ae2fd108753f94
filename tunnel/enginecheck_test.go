package tunnel

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/enginecheck"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// pinnedOne sends every frame to engine 1 until the engine checks exclude
// it, as selector.Pinned does for engine: afalg (the tunnel's tests do not
// import the selector, which sits above the tunnel).
type pinnedOne struct{ out atomic.Bool }

func (p *pinnedOne) Pick(int, engine.Direction) int {
	if p.out.Load() {
		return 0
	}
	return 1
}

func (p *pinnedOne) Exclude(idx int, _ error) {
	if idx == 1 {
		p.out.Store(true)
	}
}

// checkedPair runs a client and a server whose record layers use an
// engine from newEngine (one each) for every frame (pinned, as engine:
// afalg would), with mod applied to both ends' options, and an echo
// service.
func checkedPair(t *testing.T, newEngine func() engine.Engine, mod func(*Options)) (echo string, srv *Server, cli *Client, logs *observer.ObservedLogs) {
	t.Helper()
	echoT := startTarget(t, testutil.Echo)
	log, logs := testutil.ObservedLogger(t)
	opts := func() Options {
		o := testOptions(log)
		o.Engines = []engine.Engine{engine.Software{}, newEngine()}
		o.Policy = &pinnedOne{}
		o.Stats = new(record.Stats)
		if mod != nil {
			mod(&o)
		}
		return o
	}
	saddr, srv, _ := startServer(t, ServerConfig{Options: opts(), Services: map[string]string{"echo": echoT.addr()}})
	addrs, cli, _ := startClient(t, ClientConfig{Options: opts(), Server: saddr, RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "echo")
	return addrs["echo"], srv, cli, logs
}

// metricsText renders the counters as /metrics would.
func metricsText(c *counters) string {
	var b strings.Builder
	c.writePrometheus(&b)
	return b.String()
}

// An engine that gives wrong answers from the start fails its known-answer
// test when the ends start: it is taken out before any frame, data flows
// through software intact, and the failure is logged once and counted.
func TestEngineCheckAtStart(t *testing.T) {
	testutil.LeakCheck(t)
	echo, srv, cli, logs := checkedPair(t, func() engine.Engine { return &enginetest.Faulty{} }, nil)
	if err := testutil.EchoRoundTrip(echo, 200<<10, 3); err != nil {
		t.Fatalf("echo through a taken-out engine: %v", err)
	}
	for _, c := range []*counters{srv.ctr, cli.ctr} {
		m := metricsText(c)
		for _, want := range []string{
			`offload_engine_out{role="` + c.role + `",engine="faulty"} 1`,
			`offload_engine_check_failures_total{role="` + c.role + `",engine="faulty",check="kat"} 1`,
			`offload_engine_out{role="` + c.role + `",engine="software"} 0`,
			`offload_engine_check_rounds_total{role="` + c.role + `"} 1`,
		} {
			if !strings.Contains(m, want+"\n") {
				t.Errorf("%s metrics lack %s:\n%s", c.role, want, m)
			}
		}
		if n := c.stats.Frames[engine.Encrypt][1].Load() + c.stats.Frames[engine.Decrypt][1].Load(); n != 0 {
			t.Errorf("%s: the taken-out engine still got %d frames", c.role, n)
		}
	}
	if n := logs.FilterMessageSnippet("is taken out").Len(); n != 2 {
		t.Errorf("%d take-out log lines, want one per end", n)
	}
	for _, e := range logs.FilterMessageSnippet("is taken out").All() {
		if err, _ := e.ContextMap()["error"].(string); !strings.Contains(err, engine.ErrSelfTest.Error()) {
			t.Errorf("log says %v, want the self-test error", e.ContextMap())
		}
	}
}

// An engine whose driver hangs (an operation that never returns) fails its
// known-answer test after the timeout instead of stopping the start: it is
// taken out and data flows through software.
func TestEngineCheckHangs(t *testing.T) {
	testutil.LeakCheck(t)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	start := time.Now()
	echo, srv, cli, logs := checkedPair(t, func() engine.Engine { return &enginetest.Faulty{Hang: hang} },
		func(o *Options) { o.engineCheckTimeout = 200 * time.Millisecond })
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the ends took %v to start beside a hung engine", d)
	}
	if err := testutil.EchoRoundTrip(echo, 64<<10, 2); err != nil {
		t.Fatalf("echo beside a hung engine: %v", err)
	}
	for _, c := range []*counters{srv.ctr, cli.ctr} {
		m := metricsText(c)
		for _, want := range []string{
			`offload_engine_out{role="` + c.role + `",engine="faulty"} 1`,
			`offload_engine_check_failures_total{role="` + c.role + `",engine="faulty",check="kat"} 1`,
		} {
			if !strings.Contains(m, want+"\n") {
				t.Errorf("%s metrics lack %s", c.role, want)
			}
		}
	}
	if n := logs.FilterMessageSnippet("is taken out").FilterField(zap.String("engine", "faulty")).Len(); n != 2 {
		t.Errorf("%d take-out lines for the hung engine, want one per end", n)
	}
	for _, e := range logs.FilterMessageSnippet("is taken out").All() {
		if err, _ := e.ContextMap()["error"].(string); !strings.Contains(err, "no answer within 200ms") {
			t.Errorf("log says %v, want the timeout", e.ContextMap())
		}
	}
}

// An engine that passes its checks at start and then stops answering in
// the data path (a request the device lost) delays the frame by the stall
// timeout, no more: the frame is redone in software, the engine is taken
// out and counted, and the stream on the link, and the link itself, go on.
// Before, the link carried nothing until keepalive cut it, and every
// stream on it was reset.
func TestEngineStallInDataPath(t *testing.T) {
	testutil.LeakCheck(t)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	var made atomic.Int32
	engines := func() engine.Engine {
		if made.Add(1) == 1 {
			return &enginetest.Faulty{Bad: func(uint64) bool { return false }} // the server's
		}
		// The client's: right on the known-answer test at start, and on
		// a few frames after it; then every request hangs.
		return &enginetest.Faulty{Bad: func(uint64) bool { return false }, Hang: hang, HangAfter: 8}
	}
	echo, srv, cli, logs := checkedPair(t, engines, func(o *Options) { o.engineStallTimeout = 200 * time.Millisecond })
	if err := testutil.EchoRoundTrip(echo, 1<<20, 6); err != nil {
		t.Fatalf("echo across a stalled engine request: %v", err)
	}
	if !cli.guard.IsOut(1) || srv.guard.IsOut(1) {
		t.Fatalf("engine out: client %v (want true), server %v", cli.guard.IsOut(1), srv.guard.IsOut(1))
	}
	n := cli.guard.Stalls(1)
	if n == 0 || n > 2*record.DefaultWorkers {
		// At most one per worker of each direction: the engine is out
		// after the first, but the others may already hang in it.
		t.Errorf("%d stalls, want 1..%d (one per worker, before the engine was out)", n, 2*record.DefaultWorkers)
	}
	m := metricsText(cli.ctr)
	if want := fmt.Sprintf(`offload_engine_check_failures_total{role="client",engine="faulty",check="stall"} %d`, n); !strings.Contains(m, want+"\n") {
		t.Errorf("client metrics lack %s", want)
	}
	if got := logs.FilterMessageSnippet("is taken out").FilterField(zap.String("check", "stall")).Len(); got != 1 {
		t.Errorf("%d take-out lines for the stall, want 1", got)
	}
	if got := logs.FilterMessageSnippet("engine request stalled").Len(); got == 0 {
		t.Error("the stall was not logged")
	}
	if got := logs.FilterMessage("link up").Len(); got != 2 {
		t.Errorf("%d link-up lines, want 2 (one link, both ends): the stall must not cut the link", got)
	}
	// Later streams go through software on the same link.
	if err := testutil.EchoRoundTrip(echo, 256<<10, 7); err != nil {
		t.Fatal(err)
	}
}

// An engine that breaks later is found by the periodic known-answer test.
func TestEngineCheckPeriodic(t *testing.T) {
	testutil.LeakCheck(t)
	var broken atomic.Bool
	faulty := func() engine.Engine { return &enginetest.Faulty{Bad: func(uint64) bool { return broken.Load() }} }
	echo, srv, _, _ := checkedPair(t, faulty, func(o *Options) { o.engineCheckEvery = 20 * time.Millisecond })
	if err := testutil.EchoRoundTrip(echo, 64<<10, 1); err != nil {
		t.Fatal(err)
	}
	if srv.guard.IsOut(1) || srv.ctr.stats.Frames[engine.Encrypt][1].Load() == 0 {
		t.Fatal("a good engine was taken out or not used")
	}
	broken.Store(true)
	eventually(t, 5*time.Second, "the periodic check to take the engine out", func() bool { return srv.guard.IsOut(1) })
	if n := srv.guard.KATFailures[1].Load(); n != 1 {
		t.Errorf("%d known-answer failures counted, want 1 (then the engine is out)", n)
	}
}

// An engine that passes its known-answer test but miscomputes real frames
// is caught by verify: with verify 1 the data arrives intact, and the
// first wrong frame takes the engine out. With verify 0 the corruption
// goes through under a valid tag, which is what verify is for.
func TestEngineVerify(t *testing.T) {
	for _, verify := range []int{1, 0} {
		t.Run(map[int]string{1: "verify 1", 0: "verify 0"}[verify], func(t *testing.T) {
			testutil.LeakCheck(t)
			// The server's engine is right; the client's is right on the 4
			// operations of the known-answer test at start and wrong on
			// every encryption after. (Wrong answers on both ends could
			// cancel out in an echo.)
			var made atomic.Int32
			faulty := func() engine.Engine {
				if made.Add(1) == 1 {
					return &enginetest.Faulty{Bad: func(uint64) bool { return false }}
				}
				return &enginetest.Faulty{OnlyEncrypt: true, Bad: func(n uint64) bool { return n > 4 }}
			}
			echo, srv, cli, logs := checkedPair(t, faulty, func(o *Options) { o.Verify = verify })
			// Without verify, wrong plaintext under valid tags can be any
			// bytes to the mux, a window update or a frame header among
			// them: the echo comes back wrong, or the link breaks, or a
			// stream waits for credit that was lost. The deadline makes
			// that stall an error too (with verify the echo must pass).
			d := time.Duration(0)
			if verify == 0 {
				d = 30 * time.Second
			}
			err := testutil.EchoRoundTripWithin(echo, 256<<10, 5, d)
			if verify == 0 {
				if err == nil {
					t.Fatal("a miscomputing engine without verify: the echo came back intact, so the test engine did not miscompute")
				}
				t.Logf("without verify: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("echo with verify 1: %v", err)
			}
			var failures uint64
			for _, c := range []*counters{srv.ctr, cli.ctr} {
				_, mismatches := c.guard.VerifyCounts(1)
				failures += mismatches
				if mismatches > 0 && !c.guard.IsOut(1) {
					t.Errorf("%s: %d mismatches and the engine is not out", c.role, mismatches)
				}
			}
			if failures == 0 {
				t.Fatal("no mismatch counted")
			}
			entries := logs.FilterMessageSnippet("is taken out").All()
			if len(entries) == 0 || entries[0].ContextMap()["check"] != enginecheck.Verify {
				t.Errorf("take-out logs: %v", entries)
			}
			if srv.ctr.stats.Fallbacks[1].Load()+cli.ctr.stats.Fallbacks[1].Load() < failures {
				t.Error("mismatched frames were not redone in software")
			}
		})
	}
}

// Verify below 0 is a configuration error; verify with software alone
// makes no Verifier.
func TestEngineVerifyOptions(t *testing.T) {
	log, _ := testutil.ObservedLogger(t)
	o := testOptions(log)
	o.Verify = -1
	if _, err := NewServer(ServerConfig{Options: o, Services: map[string]string{"a": "127.0.0.1:1"}}); !errors.Is(err, ErrConfig) {
		t.Errorf("verify -1: %v, want ErrConfig", err)
	}
	o.Verify = 3
	srv, err := NewServer(ServerConfig{Options: o, Services: map[string]string{"a": "127.0.0.1:1"}})
	if err != nil || srv.opt.verifier != nil {
		t.Errorf("software only with verify 3: %v, verifier %v", err, srv.opt.verifier)
	}
}

// An engine that seals whole frames (engine: afalg-aead) is checked on
// whole frames too: its Crypters may pass the known answer while its
// sealer tags wrong ciphertext. Before, SelfTest alone ran: the engine
// stayed in, and with verify 0 the echo came back corrupt under valid
// tags. Now it is taken out at start and the data arrives intact.
func TestEngineCheckFrameSealerAtStart(t *testing.T) {
	testutil.LeakCheck(t)
	echo, srv, cli, logs := checkedPair(t, func() engine.Engine { return &enginetest.FaultyFrames{} }, func(o *Options) {
		if o.Suite.MAC != suite.HMACSHA256 {
			t.Fatalf("suite %v: frame sealers serve hmac-sha256 suites only", o.Suite)
		}
	})
	if err := testutil.EchoRoundTrip(echo, 200<<10, 3); err != nil {
		t.Fatalf("echo with a sealer that tags wrong ciphertext: %v", err)
	}
	for _, c := range []*counters{srv.ctr, cli.ctr} {
		m := metricsText(c)
		for _, want := range []string{
			`offload_engine_out{role="` + c.role + `",engine="faulty-frames"} 1`,
			`offload_engine_check_failures_total{role="` + c.role + `",engine="faulty-frames",check="kat"} 1`,
		} {
			if !strings.Contains(m, want+"\n") {
				t.Errorf("%s metrics lack %s:\n%s", c.role, want, m)
			}
		}
	}
	for _, e := range logs.FilterMessageSnippet("is taken out").All() {
		if err, _ := e.ContextMap()["error"].(string); !strings.Contains(err, "frame") {
			t.Errorf("log says %v, want the frame self-test's error", e.ContextMap())
		}
	}
}

// A sealer that goes wrong after the check at start: verify 1 catches the
// first wrong frame before it is sent, the echo arrives intact, and the
// engine is out with check "verify"; without verify, the periodic known
// answer on whole frames takes it out.
func TestEngineCheckFrameSealerLater(t *testing.T) {
	testutil.LeakCheck(t)
	var broken atomic.Bool
	bad := func(uint64) bool { return broken.Load() }
	t.Run("verify", func(t *testing.T) {
		broken.Store(false)
		// Verify alone may find the broken engine: the known-answer test
		// runs only at start, and the engine breaks after that round is
		// over (rounds counts finished rounds), so the two checks never
		// race for it.
		echo, srv, cli, _ := checkedPair(t, func() engine.Engine { return &enginetest.FaultyFrames{Bad: bad} }, func(o *Options) {
			o.Verify = 1
			o.EngineCheckInterval = 0
		})
		eventually(t, 5*time.Second, "both ends' checks at start", func() bool { return srv.guard.Rounds.Load() > 0 && cli.guard.Rounds.Load() > 0 })
		if srv.guard.IsOut(1) || cli.guard.IsOut(1) {
			t.Fatal("a right engine was taken out at start")
		}
		broken.Store(true)
		if err := testutil.EchoRoundTrip(echo, 256<<10, 3); err != nil {
			t.Fatalf("echo with verify 1: %v", err)
		}
		if !cli.guard.IsOut(1) {
			t.Error("verify did not take the client's engine out")
		}
		// One mismatch per sealing worker at most: the engine is out after
		// the first, but the other worker may have sealed on it already.
		_, mismatches := cli.guard.VerifyCounts(1)
		m := metricsText(cli.ctr)
		if mismatches < 1 || mismatches > record.DefaultWorkers ||
			!strings.Contains(m, fmt.Sprintf(`offload_engine_check_failures_total{role="client",engine="faulty-frames",check="verify"} %d`+"\n", mismatches)) {
			t.Errorf("client: %d mismatches, want 1..%d, in the metrics as check verify:\n%s", mismatches, record.DefaultWorkers, m)
		}
	})
	t.Run("periodic", func(t *testing.T) {
		broken.Store(false)
		_, srv, _, _ := checkedPair(t, func() engine.Engine { return &enginetest.FaultyFrames{Bad: bad} }, func(o *Options) { o.engineCheckEvery = 20 * time.Millisecond })
		eventually(t, 5*time.Second, "the server's check at start", func() bool { return srv.guard.Rounds.Load() > 0 })
		if srv.guard.IsOut(1) {
			t.Fatal("a right engine was taken out at start")
		}
		broken.Store(true)
		eventually(t, 5*time.Second, "the periodic whole-frame check to take the engine out", func() bool { return srv.guard.IsOut(1) })
	})
}
