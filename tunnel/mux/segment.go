package mux

import "sync"

/* Receive segments. A data frame's body is read from the connection
   straight into segments of the receiving stream, which the consumer
   reads from (Read copies out; WriteTo writes them to its io.Writer with
   no copy of ours) and which go back to the pool as soon as they are read.
   A stream with nothing buffered holds none. Small frames fill the tail
   segment, so a peer that sends one byte per frame costs a byte per byte
   plus at most one segment per stream, not a segment per frame. Two
   sizes: small ones for interactive bytes, big ones for bulk frames.

   Lent segments. On a connection that lends what it reads (lender: the
   record layer's opened frame, through resume.Conn's read side), a body
   is taken as the pieces the connection lends (a piece never spans two
   of its frames), and a big piece is kept as it is: a segment that refers
   to the connection's buffer, which WriteTo writes to the target from
   and whose lease goes back (the frame buffer to its pool) once the
   consumer has read the piece to its end. So a bulk byte is copied by
   nobody between the decryption and the target's socket. A piece is lent
   only if it holds at least lendMin bytes and at least half the buffer
   it keeps (lendable), so a few bytes never pin a 64 KiB frame; the rest
   is copied into segments as before and its lease released at once.
   Accounting: the window counts payload bytes, as before; held counts a
   lent piece's own bytes, so the receive budget bounds it as it bounds a
   copy (a copy takes at least as much segment memory), and what its
   buffer holds beyond them (at most as much again) goes in pinned, which
   is kept within a quarter of the budget: past that pieces are copied.
   So the streams' receive memory stays within 1.25x the budget, and
   Buffered reports held + pinned. */

// Lease keeps a piece a lender lent until Release; Size is the memory it
// keeps. The same type as record.Lease and resume.Lease (an alias of the
// literal type, so that this package does not import them).
type Lease = interface {
	Release()
	Size() int
}

// lender is a connection that lends what it reads instead of copying it
// out: up to most bytes, a piece of its own buffer, which the caller must
// not write to and gives back with Release (record.Conn.ReadLent,
// resume.Conn.ReadLent).
type lender interface {
	ReadLent(most int) ([]byte, Lease, error)
}

// lendMin is the smallest piece kept lent; smaller ones are copied.
const lendMin = smallSegment

// lendable says whether a piece of n bytes whose lease keeps size bytes is
// kept lent, and what it keeps beyond its bytes: only a piece of at
// least lendMin bytes and half its buffer, while the session's pinned
// memory stays within a quarter of its budget, and n more bytes within
// the budget. Only recvLoop adds to pinned and held, so the check holds
// until it does.
func (s *Session) lendable(n, size int) (int, bool) {
	slack := max(0, size-n)
	ok := n >= lendMin && slack <= n &&
		s.pinned.Load()+int64(slack) <= int64(s.cfg.ReceiveBudget/4) &&
		s.held.Load()+int64(n) <= int64(s.cfg.ReceiveBudget)
	return slack, ok
}

const (
	smallSegment = 4 << 10
	bigSegment   = 64 << 10
)

var (
	smallPool = sync.Pool{New: func() any { return new([smallSegment]byte) }}
	bigPool   = sync.Pool{New: func() any { return new([bigSegment]byte) }}
)

// segment is a pooled buffer, or a piece the connection lent: buf[r:w] is
// buffered and unread.
type segment struct {
	buf  []byte
	r, w int

	// A lent piece: buf is the connection's (never written to), its
	// lease given back by release; slack is the memory the lease keeps
	// beyond the piece's bytes (Session.pinned).
	lease Lease
	slack int
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
	if s.lease != nil {
		s.lease.Release()
		s.lease, s.buf = nil, nil
		return
	}
	switch len(s.buf) {
	case bigSegment:
		bigPool.Put((*[bigSegment]byte)(s.buf))
	case smallSegment:
		smallPool.Put((*[smallSegment]byte)(s.buf))
	}
	s.buf = nil
}
