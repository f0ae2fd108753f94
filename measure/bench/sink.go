package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
)

// sinkReadSize is the sink's read buffer.
const sinkReadSize = 64 << 10

// ServeSink accepts streams on ln until ctx ends, reads each to its EOF,
// answers with the payload's count and digest and closes it. It closes ln
// and returns once every stream has ended; a failed stream is logged, not
// returned, so one bad client does not stop the sink.
func ServeSink(ctx context.Context, ln net.Listener, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	stop := context.AfterFunc(ctx, func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.SetDeadline(time.Unix(1, 0))
		}
		mu.Unlock()
	})
	defer stop()
	var err error
	for {
		conn, aerr := ln.Accept()
		if aerr != nil {
			if ctx.Err() == nil && !errors.Is(aerr, net.ErrClosed) {
				err = fmt.Errorf("bench sink: accept: %w", aerr)
			}
			break
		}
		mu.Lock()
		conns[conn] = struct{}{}
		mu.Unlock()
		if ctx.Err() != nil {
			_ = conn.SetDeadline(time.Unix(1, 0))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, serr := sinkStream(conn)
			_ = conn.Close()
			mu.Lock()
			delete(conns, conn)
			mu.Unlock()
			if serr != nil && ctx.Err() == nil {
				log.Warn("bench sink: stream failed", zap.Stringer("remote", conn.RemoteAddr()), zap.Int64("bytes", n), zap.Error(serr))
			}
		}()
	}
	_ = ln.Close()
	wg.Wait()
	return err
}

// sinkStream serves one stream and returns the payload bytes read.
func sinkStream(conn net.Conn) (int64, error) {
	r := bufio.NewReaderSize(conn, sinkReadSize)
	var hdr [headerSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, fmt.Errorf("read header: %w", err)
	}
	if string(hdr[:len(headerMagic)]) != headerMagic {
		return 0, fmt.Errorf("%w: header %q", ErrProtocol, hdr[:])
	}
	h, err := Digest(hdr[len(headerMagic)]).new()
	if err != nil {
		return 0, err
	}
	n, err := r.WriteTo(h)
	if err != nil {
		return n, fmt.Errorf("read payload after %d bytes: %w", n, err)
	}
	if _, err := conn.Write(h.Sum(binary.BigEndian.AppendUint64(nil, uint64(n)))); err != nil {
		return n, fmt.Errorf("write answer: %w", err)
	}
	return n, nil
}
