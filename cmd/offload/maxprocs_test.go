package main

import (
	"context"
	"runtime"
	"testing"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
)

// max_procs reaches the runtime through the start of an end
// (tunnelOptions), and GOMAXPROCS in the environment wins over it.
func TestMaxProcs(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	start := func(t *testing.T, procs string) {
		t.Helper()
		c, err := config.ParseClient("client.yaml", []byte("server: 127.0.0.1:7000\nforwards:\n  - listen: 127.0.0.1:8080\n    service: web\nkey_file: offload.key\nmax_procs: "+procs+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tunnelOptions(context.Background(), &c.Common, c.TunnelOptions(), make([]byte, 32), zap.NewNop()); err != nil {
			t.Fatal(err)
		}
	}

	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(3)
	start(t, "1")
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("max_procs 1: GOMAXPROCS %d, want 1", got)
	}
	start(t, "0")
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("max_procs 0 changed GOMAXPROCS to %d; it leaves the runtime's choice", got)
	}

	t.Setenv("GOMAXPROCS", "3")
	runtime.GOMAXPROCS(3)
	start(t, "2")
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Errorf("max_procs 2 with GOMAXPROCS=3 in the environment: GOMAXPROCS %d, want 3 (the environment wins)", got)
	}
}
