package tunnel

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/suite"
)

// pingShaped is a 12-byte yamux ping (type 2, SYN, stream 0), the bytes a
// stream's payload is made of in TestPingShapedStreams: a mux that read
// them as headers would see a ping flood, not a bad version.
var pingShaped = [12]byte{0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7}

// pingShapedRoundTrip sends n bytes of pingShaped through the echo at addr
// in writes of random sizes (so the pattern lands at every offset of the
// frames), half-closes, and checks every byte that comes back.
func pingShapedRoundTrip(addr string, n int, seed uint64) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(seed, 1))
		buf := make([]byte, 80<<10)
		for i := range buf {
			buf[i] = pingShaped[i%len(pingShaped)]
		}
		for off := 0; off < n; {
			k := min(n-off, 1+r.IntN(len(buf)-len(pingShaped)))
			i := off % len(pingShaped)
			if _, err := c.Write(buf[i : i+k]); err != nil {
				errc <- err
				return
			}
			off += k
		}
		errc <- c.(*net.TCPConn).CloseWrite()
	}()
	got := 0
	buf := make([]byte, 32<<10)
	for {
		k, rerr := c.Read(buf)
		for i, b := range buf[:k] {
			if want := pingShaped[(got+i)%len(pingShaped)]; b != want {
				return fmt.Errorf("byte %d of %d came back as %#x, want %#x", got+i, n, b, want)
			}
		}
		got += k
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return fmt.Errorf("receive after %d bytes: %w", got, rerr)
		}
	}
	if werr := <-errc; werr != nil {
		return fmt.Errorf("send: %w", werr)
	}
	if got != n {
		return fmt.Errorf("echo of %d bytes came back as %d", n, got)
	}
	return nil
}

// TestPingShapedStreams: the two-router anchor's failed run as a test on
// one host (docs/lab/router-anchor.md, 2026-12-07): aes-256-ctr-poly1305
// in software, 64 KiB frames, the client started before the server (its
// first dial refused, the next one 20 ms later), a short keepalive, one
// bulk stream and a dozen small ones, on one P and on two. Every payload
// byte is a byte of a yamux ping header and every byte is checked, so a
// data path that put a stream's bytes out of step (a header and its body
// apart, a buffer reused too soon) fails it: as a ping flood, a protocol
// error or a wrong byte. It never did; the anchor's flood was its guest's
// clock going back (tunnel/mux/pinglimit.go).
func TestPingShapedStreams(t *testing.T) {
	testutil.LeakCheck(t)
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			testPingShapedStreams(t)
		})
	}
}

func testPingShapedStreams(t *testing.T) {
	log, _ := testutil.ObservedLogger(t)
	opt := plainOptions(log)
	s, err := suite.Parse("aes-256-ctr-poly1305")
	if err != nil {
		t.Fatal(err)
	}
	opt.Suite, opt.MaxFrame, opt.Keepalive = s, 64<<10, MinKeepalive
	echoT := startTarget(t, testutil.Echo)

	// The server's address, with nobody listening yet: the client's
	// first dial is refused.
	ln := testutil.Listen(t)
	saddr := ln.Addr().String()
	_ = ln.Close()
	addrs, cli, _ := startClient(t, ClientConfig{Options: opt, Server: saddr, RedialMin: 20 * time.Millisecond, RedialMax: 200 * time.Millisecond}, "echo")
	eventually(t, 5*time.Second, "the client's first dial to be refused", func() bool { return cli.ctr.redials.Load() > 0 })
	ln, err = net.Listen("tcp", saddr)
	if err != nil {
		t.Skipf("the server's port was taken meanwhile: %v", err)
	}
	startServerOn(t, ln, ServerConfig{Options: opt, Services: map[string]string{"echo": echoT.addr()}})

	bulk := 8 << 20
	if testing.Short() {
		bulk = 2 << 20
	}
	var wg sync.WaitGroup
	errs := make(chan error, 13)
	for i := range 13 {
		n := bulk
		if i > 0 {
			n = 1 + rand.IntN(256<<10)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pingShapedRoundTrip(addrs["echo"], n, uint64(i)); err != nil {
				errs <- fmt.Errorf("stream %d (%d bytes): %w", i, n, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := cli.ctr.linkErrors.Load(); n != 0 {
		t.Errorf("the client's link failed %d times", n)
	}
	if enc := cli.Stats().Bytes[0][0].Load(); enc < uint64(bulk) {
		t.Errorf("the client encrypted %d bytes, the bulk stream alone is %d", enc, bulk)
	}
}
