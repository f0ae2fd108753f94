package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/offload-dev/offload/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startSink runs ServeSink on loopback until the test ends.
func startSink(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeSink(ctx, ln, zaptest.NewLogger(t)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeSink: %v", err)
		}
	})
	return ln.Addr().String()
}

// relay forwards each connection to target through fn, which copies one
// direction (client → target) and may damage it; the other direction is
// copied as is. Half-closes are passed on.
func relay(t *testing.T, target string, fn func(dst io.Writer, src io.Reader) error) string {
	t.Helper()
	return testutil.Serve(t, func(c net.Conn) {
		u, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer u.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = fn(u, c)
			_ = u.(*net.TCPConn).CloseWrite()
		}()
		_, _ = io.Copy(c, u)
		_ = c.Close()
		<-done
	})
}

func TestRunVerifiesThroughSink(t *testing.T) {
	addr := startSink(t)
	for _, d := range []Digest{CRC32C, SHA256} {
		var sent atomic.Int64
		res, err := Run(context.Background(), Load{Addr: addr, Streams: 3, Bytes: 1<<20 + 7, WriteSize: 1000, Digest: d, Sent: &sent})
		if err != nil {
			t.Fatalf("%v: %v", d, err)
		}
		if !res.Verified || res.Bytes != 1<<20+7 || sent.Load() != res.Bytes || res.Streams != 3 {
			t.Errorf("%v: %+v, sent %d; want verified, %d bytes", d, res, sent.Load(), 1<<20+7)
		}
		if res.MBps() <= 0 || res.Elapsed <= 0 {
			t.Errorf("%v: rate %v over %v", d, res.MBps(), res.Elapsed)
		}
	}
}

func TestRunDuration(t *testing.T) {
	addr := startSink(t)
	res, err := Run(context.Background(), Load{Addr: addr, Streams: 2, Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verified || res.Bytes == 0 || res.Elapsed < 100*time.Millisecond {
		t.Errorf("got %+v; want verified bytes over at least 100ms", res)
	}
}

func TestRunDetectsCorruption(t *testing.T) {
	sink := startSink(t)
	flip := relay(t, sink, func(dst io.Writer, src io.Reader) error {
		b, err := io.ReadAll(src)
		if len(b) > 5000 {
			b[5000] ^= 1
		}
		_, _ = dst.Write(b)
		return err
	})
	_, err := Run(context.Background(), Load{Addr: flip, Bytes: 64 << 10})
	if !errors.Is(err, ErrMismatch) {
		t.Errorf("flipped bit: err %v, want ErrMismatch", err)
	}
	short := relay(t, sink, func(dst io.Writer, src io.Reader) error {
		b, err := io.ReadAll(src)
		_, _ = dst.Write(b[:len(b)-1])
		return err
	})
	_, err = Run(context.Background(), Load{Addr: short, Bytes: 64 << 10})
	if !errors.Is(err, ErrMismatch) {
		t.Errorf("lost byte: err %v, want ErrMismatch", err)
	}
}

// discard is a service that reads everything and closes without answering.
func discard(t *testing.T) string {
	t.Helper()
	return testutil.Serve(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
}

func TestRunDiscardService(t *testing.T) {
	addr := discard(t)
	_, err := Run(context.Background(), Load{Addr: addr, Bytes: 10000})
	if !errors.Is(err, ErrNoAnswer) {
		t.Errorf("discard without AllowUnverified: err %v, want ErrNoAnswer", err)
	}
	res, err := Run(context.Background(), Load{Addr: addr, Bytes: 10000, AllowUnverified: true})
	if err != nil || res.Verified || res.Bytes != 10000 {
		t.Errorf("discard with AllowUnverified: %+v, %v; want 10000 unverified bytes", res, err)
	}
}

func TestSinkRefusesOtherProtocols(t *testing.T) {
	addr := startSink(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if len(b) != 0 {
		t.Errorf("sink answered %q to a non-bench stream; want a close", b)
	}
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Logf("read: %v", err)
	}
}

func TestRunCancel(t *testing.T) {
	addr := startSink(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Run(ctx, Load{Addr: addr, Bytes: 1 << 40, Streams: 2})
	if err == nil {
		t.Fatal("Run of 1 TiB returned nil after its context ended")
	}
}

func TestProcessCPUAdvances(t *testing.T) {
	c0, ok := ProcessCPU()
	if !ok {
		t.Skip("no getrusage here")
	}
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x += i ^ (x >> 3)
	}
	c1, _ := ProcessCPU()
	if c1.Total() <= c0.Total() {
		t.Errorf("CPU time did not advance: %v then %v (x=%d)", c0, c1, x)
	}
}

func TestParseStatus(t *testing.T) {
	m, err := parseStatus([]byte("Name:\toffload\nVmPeak:\t  900 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nThreads:\t5\n"))
	if err != nil || m.RSS != 1024<<10 || m.Peak != 2048<<10 {
		t.Errorf("got %+v, %v", m, err)
	}
	if _, err := parseStatus([]byte("Name:\tkthreadd\n")); err == nil {
		t.Error("status without Vm lines: no error")
	}
	if _, err := parseStatus([]byte("VmRSS:\t12 MB\nVmHWM:\t1 kB\n")); err == nil {
		t.Error("VmRSS in MB: no error")
	}
	if m, err := ProcMemory(os.Getpid()); err != nil || m.RSS <= 0 || m.Peak < m.RSS {
		if _, serr := os.Stat("/proc/self/status"); serr == nil {
			t.Errorf("own memory: %+v, %v", m, err)
		}
	}
}

func TestParseCPUModel(t *testing.T) {
	for in, want := range map[string]string{
		"processor\t: 0\nmodel name\t: AMD EPYC\nprocessor\t: 1\nmodel name\t: AMD EPYC\n": "AMD EPYC",
		"system type\t\t: MediaTek MT7621 ver:1 eco:3\ncpu model\t\t: MIPS 1004Kc V2.15\n": "MIPS 1004Kc V2.15",
		"Processor\t: ARMv7 Processor rev 1 (v7l)\nHardware\t: Qualcomm IPQ4019\n":         "Qualcomm IPQ4019",
		"": "",
	} {
		if got := parseCPUModel([]byte(in)); got != want {
			t.Errorf("parseCPUModel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseStat(t *testing.T) {
	line := "1234 (ssh d) x) S 77 1234 1234 0 -1 4194560 500 0 0 0 150 25 30 5 20 0 1 0 100 1000 200 18446744073709551615\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 77 || st.cpu.User != 1800*time.Millisecond || st.cpu.System != 300*time.Millisecond {
		t.Errorf("got %+v; want ppid 77, user 1.8s (150+30 ticks), system 0.3s (25+5 ticks)", st)
	}
	if _, err := parseStat([]byte("1 (init) S 0 1")); err == nil {
		t.Error("short line: no error")
	}
}

func TestTreeCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	if _, err := TreeCPU([]int{1 << 30}); err == nil {
		t.Error("TreeCPU of a pid that does not exist: no error")
	}
	// A shell that burns CPU for a while, then sleeps in a child.
	cmd := exec.Command(sh, "-c", `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 30`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	c0, err := TreeCPU([]int{cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c1, err := TreeCPU([]int{cmd.Process.Pid})
		if err != nil {
			t.Fatal(err)
		}
		if c1.Total() > c0.Total() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Error("CPU time of a busy process tree did not advance in 20s")
}
