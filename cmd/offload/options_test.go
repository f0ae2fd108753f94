package main

import (
	"bytes"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/tunnel"
)

// effective is what a start does with a tunnel.Options setting, 0 always
// meaning off (none, at once, only at start).
type effective struct {
	Suite                                          string
	MaxFrame, YamuxWindow, MaxStreams, LinkBuffer  int
	Keepalive, RekeyInterval, DialTimeout          time.Duration
	HandshakeTimeout, DrainTimeout, StatusInterval time.Duration
	EngineCheckInterval, LinkWait, ResumeWindow    time.Duration
	Verify                                         int
}

// effectiveOf is what the tunnel makes of o: the options as they are
// (tunnel.Options has no zero value that stands for a default), once
// Check passed them.
func effectiveOf(t *testing.T, o tunnel.Options) effective {
	t.Helper()
	if err := o.Check(); err != nil {
		t.Fatal(err)
	}
	return effective{
		Suite: o.Suite.String(), MaxFrame: o.MaxFrame, YamuxWindow: o.YamuxWindow, MaxStreams: o.MaxStreams, LinkBuffer: o.LinkBuffer,
		Keepalive: o.Keepalive, RekeyInterval: o.RekeyInterval, DialTimeout: o.DialTimeout,
		HandshakeTimeout: o.HandshakeTimeout, DrainTimeout: o.DrainTimeout, StatusInterval: o.StatusInterval,
		EngineCheckInterval: o.EngineCheckInterval, LinkWait: o.LinkWait, ResumeWindow: o.ResumeWindow, Verify: o.Verify,
	}
}

// TestConfigOptions pins the tunnel options a start makes of the repo's
// example configs and of testdata/settings (zeros, tuned values), so that
// a change in how config and tunnel share defaults that changes what a
// file means fails here.
func TestConfigOptions(t *testing.T) {
	const ctr = "aes-256-ctr-hmac-sha256"
	defaults := effective{Suite: ctr, MaxFrame: 64 << 10, YamuxWindow: 1 << 20, MaxStreams: 1024, LinkBuffer: 16 << 20,
		Keepalive: 15 * time.Second, RekeyInterval: time.Hour, DialTimeout: 10 * time.Second,
		HandshakeTimeout: 10 * time.Second, DrainTimeout: 10 * time.Second, StatusInterval: time.Minute,
		// A server has no use for LinkWait; it keeps the default.
		EngineCheckInterval: 5 * time.Minute, LinkWait: 2 * time.Second,
		// Sessions outlive links by default, on routers too.
		ResumeWindow: time.Minute}
	router := defaults
	router.YamuxWindow, router.MaxStreams = 256<<10, 64
	zeros := defaults
	zeros.Keepalive, zeros.DrainTimeout, zeros.LinkWait, zeros.EngineCheckInterval, zeros.ResumeWindow = 0, 0, 0, 0, 0
	tuned := effective{Suite: "aes-128-cbc-hmac-sha256", MaxFrame: 16 << 10, YamuxWindow: 512 << 10, MaxStreams: 100, LinkBuffer: 1 << 20,
		Keepalive: time.Second, RekeyInterval: 10 * time.Minute, DialTimeout: 3 * time.Second,
		HandshakeTimeout: 4 * time.Second, DrainTimeout: 2 * time.Second, StatusInterval: time.Minute,
		EngineCheckInterval: 30 * time.Second, LinkWait: 2 * time.Second, ResumeWindow: 5 * time.Minute, Verify: 100}
	for file, want := range map[string]effective{
		"../../examples/server.yaml":                        defaults,
		"../../examples/server-clients.yaml":                defaults,
		"../../examples/client.yaml":                        defaults,
		"../../examples/loopback/server.yaml":               defaults,
		"../../examples/loopback/client.yaml":               defaults,
		"../../packaging/openwrt/offload/files/server.yaml": router,
		"../../packaging/openwrt/offload/files/client.yaml": router,
		"testdata/settings/zeros-client.yaml":               zeros,
		"testdata/settings/tuned-server.yaml":               tuned,
	} {
		t.Run(file, func(t *testing.T) {
			cfg, err := config.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			var o tunnel.Options
			key := bytes.Repeat([]byte{1}, 32)
			switch cfg := cfg.(type) {
			case *config.Server:
				o = configOptions(cfg.TunnelOptions(), key, zap.NewNop())
			case *config.Client:
				o = configOptions(cfg.TunnelOptions(), key, zap.NewNop())
			}
			if got := effectiveOf(t, o); got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}
