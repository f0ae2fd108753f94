package tunnel

import (
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/tunnel/suite"
)

// yamux's own lines are warnings; a write cut by this end's close is not.
func TestYamuxLogLevels(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	o := Options{Logger: zap.New(core), PSK: make([]byte, 32), Suite: suite.Default}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	var resets atomic.Uint64
	c, err := o.yamuxConfig(&resets)
	if err != nil {
		t.Fatal(err)
	}
	c.Logger.Printf("[ERR] yamux: Failed to write header: record: use of closed network connection")
	c.Logger.Printf("[ERR] yamux: Failed to read header: record: frame 7: authentication failed")
	c.Logger.Printf("[WARN] yamux: frame for missing stream: Vsn:0 Type:1 Flags:0 StreamID:3 Length:0")
	for range 100 { // a peer opening streams beyond the backlog: one line
		c.Logger.Printf("[WARN] yamux: backlog exceeded, forcing connection reset")
	}
	want := []struct {
		level zapcore.Level
		msg   string
	}{
		{zapcore.DebugLevel, "yamux: Failed to write header: record: use of closed network connection"},
		{zapcore.WarnLevel, "yamux: Failed to read header: record: frame 7: authentication failed"},
		{zapcore.WarnLevel, "yamux: frame for missing stream: Vsn:0 Type:1 Flags:0 StreamID:3 Length:0"},
		{zapcore.WarnLevel, "yamux: backlog exceeded, forcing connection reset"},
	}
	if resets.Load() != 100 {
		t.Errorf("%d backlog resets counted, want 100", resets.Load())
	}
	got := logs.All()
	if len(got) != len(want) {
		t.Fatalf("%d log entries, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Level != w.level || got[i].Message != w.msg || got[i].LoggerName != "yamux" {
			t.Errorf("entry %d: %v %q (logger %q), want %v %q (logger yamux)", i, got[i].Level, got[i].Message, got[i].LoggerName, w.level, w.msg)
		}
	}
}
