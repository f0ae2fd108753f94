package enginecheck

import (
	"errors"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// excluder records what the guard took out of the policy.
type excluder struct{ out map[int]error }

func (e *excluder) Pick(int, engine.Direction) int { return 0 }
func (e *excluder) Exclude(idx int, why error)     { e.out[idx] = why }

// The known-answer round on its own, without a tunnel: a wrong engine and
// one that does not answer within the timeout are taken out of the policy
// once each and counted; a good one stays in; software is never taken out
// (it is every engine's fallback) but is logged; a later round skips the
// engines already out.
func TestGuardCheck(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	pol := &excluder{out: map[int]error{}}
	log, logs := testutil.ObservedLogger(t)
	g := New(Config{
		Suite:   suite.Default,
		Engines: []engine.Engine{&enginetest.Faulty{Label: "software"}, engine.Software{}, &enginetest.Faulty{}, &enginetest.Faulty{Hang: hang}},
		Policy:  pol,
		Verify:  4,
		Timeout: 100 * time.Millisecond,
	}, log)
	if g.Verifier == nil || g.Stall == nil {
		t.Fatal("no verifier or stall watch for several engines")
	}
	g.Check()
	g.Check()
	if g.Rounds.Load() != 2 {
		t.Errorf("%d rounds, want 2", g.Rounds.Load())
	}
	for idx, want := range []struct {
		out      bool
		failures uint64
	}{{false, 2}, {false, 0}, {true, 1}, {true, 1}} {
		if g.IsOut(idx) != want.out || g.KATFailures[idx].Load() != want.failures {
			t.Errorf("engine %d: out %v, %d failures; want %v, %d", idx, g.IsOut(idx), g.KATFailures[idx].Load(), want.out, want.failures)
		}
	}
	if len(pol.out) != 2 || !errors.Is(pol.out[2], engine.ErrSelfTest) || !errors.Is(pol.out[3], engine.ErrSelfTest) {
		t.Errorf("taken out of the policy: %v; want engines 2 and 3, each for its self-test", pol.out)
	}
	if n := logs.FilterMessage("the software engine failed its check; it stays in use as every engine's fallback").Len(); n != 2 {
		t.Errorf("%d lines about the failing software engine, want 2 (one a round)", n)
	}
	if n := logs.FilterMessage("engine failed its check and is taken out; its frames go to software until restart").Len(); n != 2 {
		t.Errorf("%d lines about engines taken out, want 2 (one an engine)", n)
	}
}

// With software alone there is nothing to verify against or take over.
func TestGuardSoftwareAlone(t *testing.T) {
	log, _ := testutil.ObservedLogger(t)
	g := New(Config{Suite: suite.Default, Engines: []engine.Engine{engine.Software{}}, Policy: record.SoftwareOnly{}, Verify: 1}, log)
	if g.Verifier != nil || g.Stall != nil || g.Stalls(0) != 0 {
		t.Fatal("a verifier or a stall watch for software alone")
	}
	if checked, mismatches := g.VerifyCounts(0); checked != 0 || mismatches != 0 {
		t.Fatalf("verify counts %d, %d without a verifier", checked, mismatches)
	}
}
