package tunnel

import (
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/mux"
)

// The session's lines go to our logger as "yamux", at warn; a peer that
// opens streams beyond the cap gets each refused and counted, and writes
// one line, which names the setting to raise.
func TestYamuxLogLevels(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	o := DefaultOptions()
	o.Logger, o.PSK, o.MaxStreams, o.Keepalive = zap.New(core), make([]byte, 32), 1, 0
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	var resets muxResets
	a, b := net.Pipe()
	sess, err := mux.Server(b, o.muxConfig(&resets.Counters))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	go func() { _, _ = io.Copy(io.Discard, a) }()
	// MaxStreams 1: the session holds 2, its backlog 1; nothing accepts.
	var frames []byte
	for i := range 101 {
		frames = testutil.YamuxHeader(frames, testutil.YamuxWindowUpdate, testutil.YamuxSYN, uint32(2*i+1), 0)
	}
	if _, err := a.Write(frames); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for resets.Load() < 100 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := resets.Load(); n != 100 {
		t.Errorf("%d refusals counted, want 100", n)
	}
	got := logs.All()
	if len(got) != 1 {
		t.Fatalf("%d log entries, want 1: %+v", len(got), got)
	}
	if e := got[0]; e.Level != zapcore.WarnLevel || e.LoggerName != "yamux" || e.ContextMap()["raise"] != "max_streams" {
		t.Errorf("entry %v %q (logger %q, fields %v), want a warning of logger yamux that says to raise max_streams",
			e.Level, e.Message, e.LoggerName, e.ContextMap())
	}
	_ = a.Close()
}
