package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/measure/bench"
)

// load is what the applications in the client's namespace do across one
// disruption: streams echo connections, each echoing a message before and
// another after, watched in between (a read that only a reset ends); an
// upload of bytes to the sink (sha256 checked there, bench's protocol)
// and a download of bytes from the source (sha256 checked here).
type load struct {
	streams []*echoStream
	up      transfer
	down    transfer
	got     atomic.Int64 // bytes the download has read
	cancel  context.CancelFunc
}

// transfer is one direction's outcome.
type transfer struct {
	done chan struct{}
	err  error // a reset, a cut-short stream or another hash: what the application saw
}

type echoStream struct {
	c     net.Conn
	err   error // the first failure, nil while it works
	watch chan struct{}
}

// errShort is a download that ended (EOF) before all its bytes came.
var errShort = errors.New("download ended early")

// startLoad opens the streams (each echoes its first message before this
// returns) and starts both transfers.
func startLoad(ctx context.Context, r *rig, streams int, size int64, seed uint64) (*load, error) {
	l := &load{up: transfer{done: make(chan struct{})}, down: transfer{done: make(chan struct{})}}
	ctx, l.cancel = context.WithCancel(ctx)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64) // dials at once
	l.streams = make([]*echoStream, streams)
	for i := range streams {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s := &echoStream{watch: make(chan struct{})}
			l.streams[i] = s
			c, err := r.dial(ctx, "tcp", r.fwd[0])
			if err == nil {
				s.c = c
				err = echoOnce(c, message(i, 0), 2*time.Minute)
			}
			if err != nil {
				mu.Lock()
				first = errors.Join(first, fmt.Errorf("stream %d: %w", i, err))
				mu.Unlock()
				return
			}
			go s.watchRead()
		}()
	}
	wg.Wait()
	if first != nil {
		l.close()
		return nil, fmt.Errorf("opening %d echo streams: %w", streams, first)
	}
	r.srcBytes.Store(size)
	r.srcSeed.Store(seed + 1)
	go func() {
		defer close(l.up.done)
		_, l.up.err = bench.Run(ctx, bench.Load{Addr: r.fwd[1], Dial: r.dial, Bytes: size, Digest: bench.SHA256, Seed: seed})
	}()
	go func() {
		defer close(l.down.done)
		l.down.err = download(ctx, r, size, seed+1, &l.got)
	}()
	return l, nil
}

// message is stream i's message before (0) or after (1) the disruption.
func message(i, phase int) []byte {
	return []byte(fmt.Sprintf("stream %06d phase %d: through the outage", i, phase))
}

// echoOnce writes msg and reads it back, within d.
func echoOnce(c net.Conn, msg []byte, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read the echo: %w", err)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo %q of %q", got, msg)
	}
	return nil
}

// watchRead reads while the stream is idle: the echo service sends
// nothing unasked, so only a reset, an EOF or the deadline finish (the
// deadline set by finish is the one good end).
func (s *echoStream) watchRead() {
	defer close(s.watch)
	var b [1]byte
	n, err := s.c.Read(b[:])
	switch {
	case n > 0:
		s.err = fmt.Errorf("unasked byte %q while idle", b[0])
	case errors.Is(err, os.ErrDeadlineExceeded):
	default:
		s.err = fmt.Errorf("while idle: %w", err)
	}
}

// download reads size bytes of Stream(seed) from the source and checks
// their sha256 against the stream's own.
func download(ctx context.Context, r *rig, size int64, seed uint64, got *atomic.Int64) error {
	c, err := r.dial(ctx, "tcp", r.fwd[2])
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	h := sha256.New()
	n, err := copyN(h, c, size, got)
	if err == nil && n < size {
		err = fmt.Errorf("%w: %d of %d bytes", errShort, n, size)
	}
	if err != nil {
		return err
	}
	want := sha256.New()
	if _, err := io.CopyN(want, testutil.Stream(seed), size); err != nil {
		return err
	}
	if !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		return fmt.Errorf("%w: %d bytes with sha256 %x, sent %x", bench.ErrMismatch, n, h.Sum(nil), want.Sum(nil))
	}
	return nil
}

// copyN copies up to n bytes, adding each read to count (if not nil).
func copyN(dst io.Writer, src io.Reader, n int64, count *atomic.Int64) (int64, error) {
	buf := make([]byte, 64<<10)
	var done int64
	for done < n {
		k, err := src.Read(buf[:min(int64(len(buf)), n-done)])
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return done, werr
			}
			done += int64(k)
			if count != nil {
				count.Add(int64(k))
			}
		}
		if err == io.EOF {
			return done, nil
		}
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// finish ends the idle watch of every stream, has each echo its second
// message and close, and waits for both transfers (up to wait).
func (l *load) finish(wait time.Duration) {
	var wg sync.WaitGroup
	for i, s := range l.streams {
		if s.c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.c.SetReadDeadline(time.Unix(1, 0))
			<-s.watch
			if s.err == nil {
				if err := echoOnce(s.c, message(i, 1), wait); err != nil {
					s.err = fmt.Errorf("after: %w", err)
				}
			}
			if s.err == nil {
				s.err = closeClean(s.c, wait)
			}
		}()
	}
	wg.Wait()
	timeout := time.After(wait)
	for _, t := range []*transfer{&l.up, &l.down} {
		select {
		case <-t.done:
		case <-timeout:
		}
	}
	l.close()
	for _, t := range []*transfer{&l.up, &l.down} {
		<-t.done
		if errors.Is(t.err, context.Canceled) {
			t.err = fmt.Errorf("stalled: not done within %v of the path's return", wait)
		}
	}
}

// closeClean half-closes and expects the echo service's EOF and nothing
// else.
func closeClean(c net.Conn, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if n, err := io.Copy(io.Discard, c); err != nil || n != 0 {
		return fmt.Errorf("close: %d bytes more, %v", n, err)
	}
	return nil
}

// close closes every stream (finish's end, or a failed start's).
func (l *load) close() {
	l.cancel()
	for _, s := range l.streams {
		if s != nil && s.c != nil {
			s.c.Close()
		}
	}
}

// resets counts the streams that failed (of those opened) and the first
// few errors, for the report.
func (l *load) resets() (n int, examples []string) {
	for i, s := range l.streams {
		if s != nil && s.err != nil {
			n++
			if len(examples) < 3 {
				examples = append(examples, fmt.Sprintf("stream %d: %v", i, s.err))
			}
		}
	}
	return n, examples
}
