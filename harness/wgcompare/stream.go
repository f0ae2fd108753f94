package wgcompare

// The anchor's load generator, sink and relay: cheap on purpose, so that the
// guest's CPU goes to the path being measured and not to the rig (a load
// generator and sink that take most of the CPU pull every ratio toward 1).
//
// Wire format of one measured stream, client to sink:
//
//	magic   8 bytes  "ANCHOR01"
//	length  8 bytes  big-endian N, the payload's length
//	payload N bytes  byte i is pattern[i mod PatternSize]
//
// then the client half-closes. The sink answers with one line and closes:
//
//	ok N SAMPLES\n            all N bytes came, every sampled byte matched
//	bad REASON\n              short, mismatched or malformed
//
// What is checked, and what it costs: the count of payload bytes, and one
// byte in every SampleStride (a prime) at its stream offset against the
// pattern. The pattern is PatternSize pseudo-random bytes (not a power of
// two), so a lost, repeated or reordered piece of the stream moves the
// pattern under the samples and a sample misses with probability 255/256;
// a piece of 64 KiB holds about 129 samples. A flipped byte between samples
// is not seen here: every path but plaintext and the bare relays has its own
// MAC, and TCP its checksum. The sender writes the pattern from a file in
// tmpfs with sendfile (no user-space copy); the sink reads into a 1 MiB
// buffer and touches one byte in 509.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	// PatternSize is the period of the stream's pattern.
	PatternSize = 1<<20 + 4093
	// SampleStride is the distance between two checked bytes.
	SampleStride = 509

	magic      = "ANCHOR01"
	headerSize = 16
	// Magic and HeaderSize are the stream's header for a sink elsewhere
	// (harness/anchor -routers 2 hashes the whole stream on the host).
	Magic      = magic
	HeaderSize = headerSize
	sinkBuf    = 1 << 20
	relayBuf   = 64 << 10
)

// Pattern returns the stream's pattern: PatternSize bytes of xorshift64*.
func Pattern() []byte {
	p := make([]byte, PatternSize)
	x := uint64(0x9e3779b97f4a7c15)
	for i := 0; i < len(p); i += 8 {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], x*0x2545f4914f6cdd1d)
		copy(p[i:], w[:])
	}
	return p
}

// WritePatternFile writes the pattern to file, for Send's sendfile.
func WritePatternFile(file string) error {
	if err := os.WriteFile(file, Pattern(), 0o644); err != nil {
		return fmt.Errorf("pattern file: %w", err)
	}
	return nil
}

// Result is what the sink answered for one stream.
type Result struct {
	Bytes   int64
	Samples int64
	Elapsed time.Duration // from the first header byte to the sink's answer
}

// MBps is 10^6 payload bytes per second of Elapsed.
func (r Result) MBps() float64 { return float64(r.Bytes) / 1e6 / r.Elapsed.Seconds() }

// Send dials addr with dial, sends n bytes of the pattern from patternFile
// (sendfile: *net.TCPConn.ReadFrom of an *os.File) and returns the sink's
// verdict; an error unless the sink saw all n bytes and every sample right.
func Send(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), addr, patternFile string, n int64) (Result, error) {
	f, err := os.Open(patternFile)
	if err != nil {
		return Result{}, fmt.Errorf("send: %w", err)
	}
	defer f.Close()
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return Result{}, fmt.Errorf("send: dial %s: %w", addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	start := time.Now()
	var hdr [headerSize]byte
	copy(hdr[:], magic)
	binary.BigEndian.PutUint64(hdr[8:], uint64(n))
	if _, err := c.Write(hdr[:]); err != nil {
		return Result{}, fmt.Errorf("send: header: %w", err)
	}
	for sent := int64(0); sent < n; {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return Result{}, fmt.Errorf("send: %w", err)
		}
		m, err := io.Copy(c, &io.LimitedReader{R: f, N: min(n-sent, PatternSize)})
		sent += m
		if err != nil {
			return Result{}, fmt.Errorf("send: %d of %d bytes: %w", sent, n, err)
		}
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err != nil {
			return Result{}, fmt.Errorf("send: half-close: %w", err)
		}
	}
	line, err := bufio.NewReader(io.LimitReader(c, 256)).ReadString('\n')
	res := Result{Elapsed: time.Since(start)}
	if err != nil {
		return res, fmt.Errorf("send: no answer from the sink after %d bytes: %w", n, err)
	}
	f2 := strings.Fields(line)
	if len(f2) != 3 || f2[0] != "ok" {
		return res, fmt.Errorf("send: the sink answered %q", strings.TrimSpace(line))
	}
	res.Bytes, _ = strconv.ParseInt(f2[1], 10, 64)
	res.Samples, _ = strconv.ParseInt(f2[2], 10, 64)
	if res.Bytes != n {
		return res, fmt.Errorf("send: the sink counted %d bytes of %d", res.Bytes, n)
	}
	return res, nil
}

// Sink serves streams on l until it is closed, each checked as the file
// comment says; logf gets each stream's verdict when it is not ok.
func Sink(l net.Listener, logf func(string, ...any)) error {
	pat := Pattern()
	for {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("sink: %w", err)
		}
		go func() {
			defer c.Close()
			verdict := checkStream(c, pat)
			if !strings.HasPrefix(verdict, "ok ") {
				logf("sink: %s: %s", c.RemoteAddr(), verdict)
			}
			_, _ = io.WriteString(c, verdict+"\n")
		}()
	}
}

// checkStream reads one stream and returns the sink's answer line.
func checkStream(c net.Conn, pat []byte) string {
	var hdr [headerSize]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return "bad header: " + err.Error()
	}
	if string(hdr[:8]) != magic {
		return fmt.Sprintf("bad magic %q", hdr[:8])
	}
	n := int64(binary.BigEndian.Uint64(hdr[8:]))
	buf := make([]byte, sinkBuf)
	var off, samples int64
	bad := ""
	for off < n {
		m, err := c.Read(buf[:min(int64(len(buf)), n-off)])
		// Samples are the stream offsets that are multiples of the stride.
		for pos := (off + SampleStride - 1) / SampleStride * SampleStride; pos < off+int64(m); pos += SampleStride {
			if bad == "" && buf[pos-off] != pat[pos%PatternSize] {
				bad = fmt.Sprintf("bad byte at offset %d", pos)
			}
			samples++
		}
		off += int64(m)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Sprintf("bad short stream: %d of %d bytes", off, n)
			}
			return fmt.Sprintf("bad read after %d of %d bytes: %v", off, n, err)
		}
	}
	if bad != "" {
		return bad
	}
	return fmt.Sprintf("ok %d %d", off, samples)
}

// Relay forwards every connection accepted on l to target with dial: a
// bare user-space hop with 64 KiB Read/Write per direction and nothing
// else (no io.Copy, which would splice), the floor of any user-space TCP
// tunnel. Half-closes pass through.
func Relay(l net.Listener, target string, dial func(context.Context, string, string) (net.Conn, error)) error {
	return relay(l, target, dial, func(dst, src net.Conn, _ bool) { pump(dst, src) })
}

// ZeroCopyStats is what one zero-copy pump did.
type ZeroCopyStats struct {
	Sends  uint64 // sendmsg calls that queued bytes
	Copied uint64 // of them, reported as copied by the kernel
	Waits  uint64 // times a buffer was still in flight when wanted
	Polled bool   // src was read outside Go's poller (pollRead)
}

// RelayZeroCopy is Relay with MSG_ZEROCOPY sends (zerocopy_linux.go);
// report, if not nil, gets each direction's counts when it ends.
func RelayZeroCopy(l net.Listener, target string, dial func(context.Context, string, string) (net.Conn, error), report func(ZeroCopyStats, error)) error {
	return relay(l, target, dial, func(dst, src net.Conn, _ bool) {
		st, err := pumpZeroCopy(dst, src)
		if report != nil {
			report(st, err)
		}
	})
}

// relay accepts on l, dials target for each connection and runs pump
// both ways: toTarget from the accepted connection to the dialled one.
func relay(l net.Listener, target string, dial func(context.Context, string, string) (net.Conn, error), pump func(dst, src net.Conn, toTarget bool)) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		go func() {
			defer c.Close()
			u, err := dial(context.Background(), "tcp", target)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{})
			go func() { pump(u, c, true); close(done) }()
			pump(c, u, false)
			<-done
		}()
	}
}

// pump copies src to dst until EOF or an error, then half-closes dst.
func pump(dst, src net.Conn) {
	buf := make([]byte, relayBuf)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			closeWrite(dst)
			return
		}
	}
}

// closeWrite half-closes c where it can: what came before it is all.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// stallQuiet is how long a run may move under stallBytes across A's veth before
// rescueStalls kicks the console: a run that moves so little for this long
// is waiting for a late completion (every path moves a MB in well under it).
const stallQuiet = 3 * time.Second

// stallBytes is the progress that counts as moving: TCP's retransmissions
// trickle through a stall, a few segments per RTO, and must not hide it.
// The slowest path (offload in software) moves over 0.1 MB a second on a
// loaded host.
const stallBytes = 128 << 10

// stallWatch decides, from a byte counter sampled now and then, when a
// run has stopped moving (the anchor's rescueStalls kicks the console then).
type stallWatch struct {
	last  int64     // the counter when the run last moved stallBytes
	moved time.Time // when that was
}

func newStallWatch(now time.Time, v int64) *stallWatch { return &stallWatch{last: v, moved: now} }

// stalled takes a sample and says whether the run has moved under
// stallBytes for stallQuiet or longer.
func (w *stallWatch) stalled(now time.Time, v int64) bool {
	if v-w.last >= stallBytes {
		w.last, w.moved = v, now
		return false
	}
	return now.Sub(w.moved) >= stallQuiet
}
