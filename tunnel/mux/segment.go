package mux

import "sync"

/* Receive segments. A data frame's body is read from the connection
   straight into segments of the receiving stream, which the consumer
   reads from (Read copies out; WriteTo writes them to its io.Writer with
   no copy of ours) and which go back to the pool as soon as they are read.
   A stream with nothing buffered holds none. Small frames fill the tail
   segment, so a peer that sends one byte per frame costs a byte per byte
   plus at most one segment per stream, not a segment per frame. Two
   sizes: small ones for interactive bytes, big ones for bulk frames. */

const (
	smallSegment = 4 << 10
	bigSegment   = 64 << 10
)

var (
	smallPool = sync.Pool{New: func() any { return new([smallSegment]byte) }}
	bigPool   = sync.Pool{New: func() any { return new([bigSegment]byte) }}
)

// segment is a pooled buffer: buf[r:w] is buffered and unread.
type segment struct {
	buf  []byte
	r, w int
}

// newSegment takes a segment for a body of which n bytes remain to read.
func newSegment(n int) *segment {
	if n > smallSegment {
		return &segment{buf: bigPool.Get().(*[bigSegment]byte)[:]}
	}
	return &segment{buf: smallPool.Get().(*[smallSegment]byte)[:]}
}

// segmentSize is the size of the segment newSegment(n) takes.
func segmentSize(n int) int {
	if n > smallSegment {
		return bigSegment
	}
	return smallSegment
}

func (s *segment) release() {
	switch len(s.buf) {
	case bigSegment:
		bigPool.Put((*[bigSegment]byte)(s.buf))
	case smallSegment:
		smallPool.Put((*[smallSegment]byte)(s.buf))
	}
	s.buf = nil
}
