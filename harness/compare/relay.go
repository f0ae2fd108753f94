package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/offload-dev/offload/harness/wgcompare"
	"github.com/offload-dev/offload/internal/testutil"
)

// The relay floor (issue 28): two bare Go relays in a row, each its own
// process, Read/Write 64 KiB per direction and nothing else (no crypto, no
// framing, no splice): what any user-space TCP tunnel with two ends
// costs on this host, the same hop as harness/wgcompare's on the router
// anchor. The ends are this harness's own binary started again with
// relayEnv set, so the relay needs no build of its own and its CPU is
// counted apart from the load generator's.
//
// The sealed relay (toolSealed) is the same pair with offload's crypto on
// the hop between them and nothing else of offload
// (harness/wgcompare.SealedRelay: the software engine, frames of what one
// Read returns, up to 64 KiB): the simplest tunnel with that crypto, so
// offload beside it is the price of its design, and ssh beside it the
// price of Go's crypto and sockets against OpenSSH's.

// relayEnv, when set to "LISTEN TARGET", makes this binary a relay;
// sealEnv, "target SUITE" or "listen SUITE" beside it, a sealed one.
const (
	relayEnv = "OFFLOAD_COMPARE_RELAY"
	sealEnv  = "OFFLOAD_COMPARE_SEAL"
)

// relayMain runs the relay relayEnv (and sealEnv) name until it is
// killed; it returns only on a failure.
func relayMain(spec string) error {
	listen, target, ok := strings.Cut(spec, " ")
	if !ok || listen == "" || target == "" {
		return fmt.Errorf("%s=%q: want LISTEN TARGET", relayEnv, spec)
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	dial := (&net.Dialer{}).DialContext
	seal := os.Getenv(sealEnv)
	if seal == "" {
		return wgcompare.Relay(l, target, dial)
	}
	side, suite, ok := strings.Cut(seal, " ")
	if !ok || (side != "target" && side != "listen") {
		return fmt.Errorf("%s=%q: want target SUITE or listen SUITE", sealEnv, seal)
	}
	return wgcompare.SealedRelay(l, target, dial, side == "target", wgcompare.SealOptions{Spec: "software", Suite: suite})
}

// setupRelay starts the client-side relay (the load connects to it) and
// the server-side relay (it connects to the sink).
func setupRelay(ctx context.Context, _, sink string) (*tunnelUnderTest, toolInfo, error) {
	info := toolInfo{Name: toolRelay, Version: runtime.Version(),
		How: "two processes of this binary (" + relayEnv + "), harness/wgcompare.Relay: Read/Write 64 KiB per direction, no crypto, no splice"}
	return startRelays(ctx, info, sink, "")
}

// sealedSetup is setupRelay with the hop between the relays sealed with
// suite.
func sealedSetup(suite string) setup {
	return func(ctx context.Context, _, sink string) (*tunnelUnderTest, toolInfo, error) {
		info := toolInfo{Name: toolSealed, Version: runtime.Version(),
			How: "two processes of this binary (" + sealEnv + "), harness/wgcompare.SealedRelay: " + suite + " on the software engine, one frame per Read of up to 64 KiB, one goroutine a direction, no mux"}
		return startRelays(ctx, info, sink, suite)
	}
}

// startRelays starts the two relays, sealed with suite unless it is "".
func startRelays(ctx context.Context, info toolInfo, sink, suite string) (*tunnelUnderTest, toolInfo, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, info, err
	}
	addrs, err := freePorts(2)
	if err != nil {
		return nil, info, err
	}
	srvAddr, fwd := addrs[0], addrs[1]
	t := &tunnelUnderTest{name: info.Name, addr: fwd}
	for _, end := range []struct{ name, listen, target, seal string }{{"relay server", srvAddr, sink, "listen"}, {"relay client", fwd, srvAddr, "target"}} {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), relayEnv+"="+end.listen+" "+end.target)
		if suite != "" {
			cmd.Env = append(cmd.Env, sealEnv+"="+end.seal+" "+suite)
		}
		p, err := testutil.Start(end.name, cmd, 64<<10)
		if err != nil {
			return t, info, err
		}
		t.procs = append(t.procs, p)
		if err := waitListen(ctx, end.listen, p); err != nil {
			return t, info, err
		}
	}
	return t, info, nil
}

// sslFloor is the crypto of ssh -L aes256-ctr + hmac-sha2-256 on this
// CPU: OpenSSL's (libcrypto is what OpenSSH calls for both), measured
// with openssl speed at offload's frame size, counted as the offload
// floor is: the cipher to seal and to open, the MAC twice.
type sslFloor struct {
	Version    string  `json:"version"`
	FrameBytes int     `json:"frame_bytes"`
	Cipher     float64 `json:"cipher_s_per_gb"` // aes-256-ctr, both ways
	MAC        float64 `json:"mac_s_per_gb"`    // hmac(sha256), twice
	How        string  `json:"how"`
}

// Total is the floor's CPU s/GB.
func (f sslFloor) Total() float64 { return f.Cipher + f.MAC }

// measureSSLFloor runs openssl speed -mr for aes-256-ctr and
// hmac(sha256) at frame bytes per operation. openssl speed divides by its
// process's user CPU time, as the offload floor counts CPU.
func measureSSLFloor(ctx context.Context, frame int, seconds int) (sslFloor, error) {
	f := sslFloor{Version: toolVersion("openssl", "version"), FrameBytes: frame}
	rate := func(args ...string) (float64, error) {
		a := append([]string{"speed", "-mr", "-seconds", strconv.Itoa(seconds), "-bytes", strconv.Itoa(frame)}, args...)
		out, err := exec.CommandContext(ctx, "openssl", a...).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("openssl %s: %w\n%s", strings.Join(a, " "), err, out)
		}
		return parseSpeedMR(out)
	}
	aes, err := rate("-evp", "aes-256-ctr")
	if err != nil {
		return f, err
	}
	mac, err := rate("-hmac", "sha256")
	if err != nil {
		return f, err
	}
	f.Cipher, f.MAC = 2*1e9/aes, 2*1e9/mac
	f.How = fmt.Sprintf("openssl speed -mr -seconds %d -bytes %d -evp aes-256-ctr; -hmac sha256 (user CPU): the cipher twice and the MAC twice per byte", seconds, frame)
	return f, nil
}

// parseSpeedMR reads the bytes per second of openssl speed -mr's one
// "+F:N:NAME:RATE" line (one -bytes size).
func parseSpeedMR(out []byte) (float64, error) {
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "+F:") {
			continue
		}
		fields := strings.Split(strings.TrimSpace(l), ":")
		r, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil || r <= 0 {
			return 0, fmt.Errorf("openssl speed: bad rate line %q", l)
		}
		return r, nil
	}
	return 0, fmt.Errorf("openssl speed: no +F: line in\n%s", out)
}
