package tunnel

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/offload-dev/offload/measure/bench"
	"github.com/offload-dev/offload/tunnel/suite"
)

// BenchmarkStream is one TCP stream through a whole in-process link:
// local socket → client (splice, yamux, record) → TCP → server (record,
// yamux, splice) → target socket, software engine, default frames. It is
// the data path without the load generator's and sink's share; b.N
// iterations of 64 KiB each go through one stream. Compare with
// record's BenchmarkSealOpen for the same suite: the difference is what
// the tunnel costs beyond its crypto.
func BenchmarkStream(b *testing.B) {
	for _, s := range []suite.Suite{suite.Default, mustSuite(b, "aes-256-ctr-gmac"), mustSuite(b, "aes-256-cbc-poly1305")} {
		b.Run(s.String(), func(b *testing.B) { benchStream(b, s, 0) })
	}
}

// BenchmarkStreamResume is BenchmarkStream's default suite with sessions
// that outlive links off and on, side by side: the cost of keeping every
// byte until the peer acknowledged it (tunnel/resume). docs/tunnel.md,
// "Sessions that outlive links", has the figures.
func BenchmarkStreamResume(b *testing.B) {
	for _, w := range []struct {
		name   string
		window time.Duration
	}{{"off", 0}, {"on", time.Minute}} {
		b.Run(w.name, func(b *testing.B) { benchStream(b, suite.Default, w.window) })
	}
}

func mustSuite(tb testing.TB, name string) suite.Suite {
	s, err := suite.Parse(name)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func benchStream(b *testing.B, s suite.Suite, resumeWindow time.Duration) {
	const chunk = 64 << 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		return l
	}

	// The target discards and reports how much it got.
	tl := ln()
	defer tl.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := tl.Accept()
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		_ = c.Close()
		got <- n
	}()

	opt := DefaultOptions()
	opt.Suite, opt.PSK, opt.DialTimeout = s, make([]byte, 32), 5*time.Second
	opt.Keepalive, opt.DrainTimeout, opt.StatusInterval = 0, 0, 0
	opt.ResumeWindow = resumeWindow
	for i := range opt.PSK {
		opt.PSK[i] = byte(i + 1)
	}
	srv, err := NewServer(ServerConfig{Options: opt, Services: map[string]string{"sink": tl.Addr().String()}})
	if err != nil {
		b.Fatal(err)
	}
	sl := ln()
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(ctx, sl) }()
	fl := ln()
	cli, err := NewClient(ClientConfig{Options: opt, Server: sl.Addr().String(), Forwards: []Forward{{Listener: fl, Service: "sink"}}})
	if err != nil {
		b.Fatal(err)
	}
	cliDone := make(chan error, 1)
	go func() { cliDone <- cli.Run(ctx) }()
	defer func() {
		cancel()
		<-cliDone
		<-srvDone
	}()

	c, err := net.Dial("tcp", fl.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, chunk)
	b.SetBytes(chunk)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		b.Fatal(err)
	}
	// The stream ends cleanly once the target has everything.
	if n := <-got; n != int64(b.N)*chunk {
		b.Fatal(fmt.Errorf("target got %d bytes, sent %d", n, int64(b.N)*chunk))
	}
	b.StopTimer()
	// CPU per byte moves far less than MB/s with the machine's load: it
	// is the figure to compare between two builds.
	b.ReportMetric((processCPU(b)-cpu0).Seconds()/(float64(b.N)*chunk/1e9), "cpu-s/GB")
	_ = c.Close()
}

// processCPU is the user+system time of this process so far.
func processCPU(tb testing.TB) time.Duration {
	c, ok := bench.ProcessCPU()
	if !ok {
		tb.Skip("this platform can not tell the process's CPU time")
	}
	return c.Total()
}
