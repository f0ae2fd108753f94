// Package bench is the load generator and sink that offload bench and
// harness/compare push through tunnels: N TCP streams, each sending a
// fixed number of bytes (or for a fixed time) to a sink, which hashes what
// it got and answers with the count and the digest once the sender
// half-closes. The answer is what makes a run count: bytes a tunnel lost,
// reordered or cut short are an error, never a fast result.
//
// Wire, per stream (sender → sink):
//
//	header = "OB1" | digest:u8          'c' CRC-32C (cheap, for CPU figures), 's' SHA-256
//	payload ...                          until the sender's half-close (FIN)
//
// and back (sink → sender), then the sink closes:
//
//	count:u64be | digest[4 or 32]        of the payload only
//
// A sink that does not answer (a plain discard service, e.g. socat to
// /dev/null) is accepted with Load.AllowUnverified: the run then ends when
// the far end closes, and Result.Verified is false.
package bench

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Digest names the hash the sink computes over a stream's payload.
type Digest byte

const (
	// CRC32C is cheap (SSE4.2/ARMv8 CRC instructions), so it barely moves
	// CPU-per-byte figures; it catches loss and corruption, not attacks,
	// which is all a benchmark needs.
	CRC32C Digest = 'c'
	// SHA256 is for integrity checks where the data itself is the point.
	SHA256 Digest = 's'
)

func (d Digest) String() string {
	switch d {
	case CRC32C:
		return "crc32c"
	case SHA256:
		return "sha256"
	}
	return fmt.Sprintf("digest(%q)", byte(d))
}

func (d Digest) new() (hash.Hash, error) {
	switch d {
	case CRC32C:
		return crc32.New(crc32.MakeTable(crc32.Castagnoli)), nil
	case SHA256:
		return sha256.New(), nil
	}
	return nil, fmt.Errorf("%w: unknown digest %q", ErrProtocol, byte(d))
}

// headerMagic starts every stream; the fourth byte is the Digest.
const headerMagic = "OB1"

const (
	headerSize = len(headerMagic) + 1
	// DefaultWriteSize is the application's write size: what a program
	// copying a file or a socket typically hands to write(2).
	DefaultWriteSize = 32 << 10
	// patternSize is the pseudo-random block every stream sends from.
	patternSize = 1 << 20
)

var (
	// ErrProtocol means the other end does not speak this package's
	// stream protocol (a wrong service behind the tunnel, or a tunnel
	// that mangles bytes).
	ErrProtocol = errors.New("bench: protocol error")
	// ErrMismatch means the sink got other bytes than were sent: the
	// tunnel lost, reordered or corrupted data.
	ErrMismatch = errors.New("bench: data mismatch")
	// ErrNoAnswer means the far end closed without the sink's answer:
	// the service is not a bench sink (set Load.AllowUnverified for a
	// plain discard service) or the stream was cut.
	ErrNoAnswer = errors.New("bench: no answer from the sink")
)

// Load is one run of the load generator.
type Load struct {
	// Addr is where each stream connects: the tunnel's local end.
	Addr string
	// Dial connects; nil means a TCP dial.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Streams is the number of parallel streams (default 1).
	Streams int
	// Bytes is the payload of the whole run, split evenly over the
	// streams. Ignored when Duration is set.
	Bytes int64
	// Duration, if positive, makes each stream send until it has passed.
	Duration time.Duration
	// WriteSize is the size of each write (default DefaultWriteSize).
	WriteSize int
	// Digest is the sink's hash (default CRC32C).
	Digest Digest
	// AllowUnverified accepts a far end that closes without an answer.
	AllowUnverified bool
	// Seed varies the data (streams also differ from each other).
	Seed uint64
	// Sent, if not nil, is added every payload byte written, for progress.
	Sent *atomic.Int64
}

// Result is what a run measured.
type Result struct {
	Streams int `json:"streams"`
	// Bytes is the payload sent by all streams (and, when Verified,
	// acknowledged by the sink with a matching digest).
	Bytes    int64         `json:"bytes"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Verified bool          `json:"verified"`
	// CPU is this process's CPU time during the run (user+system), zero
	// where the platform cannot tell.
	CPU CPUTime `json:"cpu"`
}

// MBps is the payload rate in 10^6 bytes per second.
func (r Result) MBps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes) / 1e6 / r.Elapsed.Seconds()
}

// CPUPerGB is this process's CPU seconds per 10^9 payload bytes, or 0
// when unknown.
func (r Result) CPUPerGB() float64 {
	if r.Bytes == 0 || r.CPU.Total() <= 0 {
		return 0
	}
	return r.CPU.Total().Seconds() / (float64(r.Bytes) / 1e9)
}

// Run connects l.Streams streams to l.Addr at once, sends, half-closes,
// waits for every sink's answer and checks it. The first failure cancels
// the other streams and is returned.
func Run(ctx context.Context, l Load) (Result, error) {
	if l.Streams <= 0 {
		l.Streams = 1
	}
	if l.WriteSize <= 0 {
		l.WriteSize = DefaultWriteSize
	}
	if l.WriteSize > patternSize {
		return Result{}, fmt.Errorf("bench: write size %d is larger than %d", l.WriteSize, patternSize)
	}
	if l.Digest == 0 {
		l.Digest = CRC32C
	}
	if _, err := l.Digest.new(); err != nil {
		return Result{}, err
	}
	if l.Duration <= 0 && l.Bytes <= 0 {
		return Result{}, errors.New("bench: want Bytes or Duration")
	}
	if l.Dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second}
		l.Dial = d.DialContext
	}
	pattern := make([]byte, patternSize+l.WriteSize)
	rng := rand.NewChaCha8(seed32(l.Seed))
	_, _ = rng.Read(pattern[:patternSize])
	copy(pattern[patternSize:], pattern) // writes may wrap past the end

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var deadline time.Time
	cpu0, cpuOK := ProcessCPU()
	start := time.Now()
	if l.Duration > 0 {
		deadline = start.Add(l.Duration)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		total    atomic.Int64
		verified atomic.Int64
	)
	for i := range l.Streams {
		quota := l.Bytes / int64(l.Streams)
		if int64(i) < l.Bytes%int64(l.Streams) {
			quota++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stream{l: &l, pattern: pattern, off: (i * 40961) % patternSize, quota: quota, deadline: deadline}
			n, ok, err := s.run(ctx)
			total.Add(n)
			if ok {
				verified.Add(1)
			}
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("stream %d: %w", i, err)
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res := Result{Streams: l.Streams, Bytes: total.Load(), Elapsed: time.Since(start), Verified: verified.Load() == int64(l.Streams)}
	if cpu1, ok := ProcessCPU(); ok && cpuOK {
		res.CPU = CPUTime{User: cpu1.User - cpu0.User, System: cpu1.System - cpu0.System}
	}
	if firstErr != nil {
		return res, firstErr
	}
	return res, ctx.Err()
}

func seed32(s uint64) [32]byte {
	var b [32]byte
	binary.LittleEndian.PutUint64(b[:], s)
	copy(b[8:], "offload bench pattern")
	return b
}

// stream is one sender.
type stream struct {
	l        *Load
	pattern  []byte
	off      int
	quota    int64
	deadline time.Time
}

// run returns the payload bytes sent, whether the sink's answer verified
// them, and the failure, if any.
func (s *stream) run(ctx context.Context) (int64, bool, error) {
	conn, err := s.l.Dial(ctx, "tcp", s.l.Addr)
	if err != nil {
		return 0, false, fmt.Errorf("dial %s: %w", s.l.Addr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	h, _ := s.l.Digest.new()
	if _, err := conn.Write(append([]byte(headerMagic), byte(s.l.Digest))); err != nil {
		return 0, false, fmt.Errorf("write header: %w", err)
	}
	var sent int64
	for {
		n := s.l.WriteSize
		if s.deadline.IsZero() {
			if left := s.quota - sent; left < int64(n) {
				n = int(left)
			}
			if n == 0 {
				break
			}
		} else if !time.Now().Before(s.deadline) {
			break
		}
		b := s.pattern[s.off : s.off+n]
		w, err := conn.Write(b)
		h.Write(b[:w])
		sent += int64(w)
		if s.l.Sent != nil {
			s.l.Sent.Add(int64(w))
		}
		if err != nil {
			return sent, false, fmt.Errorf("write after %d bytes: %w", sent, err)
		}
		s.off = (s.off + n) % patternSize
	}
	cw, ok := conn.(interface{ CloseWrite() error })
	if !ok {
		return sent, false, fmt.Errorf("%w: %T can not half-close", ErrProtocol, conn)
	}
	if err := cw.CloseWrite(); err != nil {
		return sent, false, fmt.Errorf("half-close: %w", err)
	}
	want := h.Sum(binary.BigEndian.AppendUint64(nil, uint64(sent)))
	got := make([]byte, len(want)+1)
	n, err := io.ReadFull(conn, got)
	switch {
	case n == 0 && (err == io.EOF) && s.l.AllowUnverified:
		return sent, false, nil
	case n == 0 && err == io.EOF:
		return sent, false, fmt.Errorf("%w after %d bytes (is the service a bench sink? see offload bench -sink)", ErrNoAnswer, sent)
	case n == len(want) && errors.Is(err, io.ErrUnexpectedEOF):
		// The answer and then the close: what a sink does.
	case err == nil:
		return sent, false, fmt.Errorf("%w: more than a %d-byte answer", ErrProtocol, len(want))
	default:
		return sent, false, fmt.Errorf("read answer after %d bytes sent (%d of %d answer bytes): %w", sent, n, len(want), err)
	}
	got = got[:n]
	if gotN := binary.BigEndian.Uint64(got); gotN != uint64(sent) {
		return sent, false, fmt.Errorf("%w: sink got %d bytes, %d were sent", ErrMismatch, gotN, sent)
	}
	if string(got[8:]) != string(want[8:]) {
		return sent, false, fmt.Errorf("%w: %s of the %d bytes the sink got differs from what was sent", ErrMismatch, s.l.Digest, sent)
	}
	return sent, true, nil
}
