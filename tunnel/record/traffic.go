package record

import (
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/engine"
)

// Traffic counts one link's plaintext bytes as they pass Write and Read:
// what the stream multiplexer above sends and receives, its own headers
// included. The counts move with every Write and every Read (an atomic
// add each, no lock), so a long transfer shows while it runs, unlike
// counts taken when a stream ends. Parent, if not nil, counts the same
// bytes too: a server gives each link its own Traffic with its client's
// as the parent, so the client's total is exact without summing links
// that come and go.
type Traffic struct {
	Sent     atomic.Uint64 // bytes Write took
	Received atomic.Uint64 // bytes Read returned
	Parent   *Traffic      // set before the Conn is made; nil: none
}

func (t *Traffic) sent(n int) {
	for ; t != nil; t = t.Parent {
		t.Sent.Add(uint64(n))
	}
}

func (t *Traffic) received(n int) {
	for ; t != nil; t = t.Parent {
		t.Received.Add(uint64(n))
	}
}

// epochs is a Conn's own rekey record, for a status view: how many
// epochs each direction has begun since the handshake, and when the last
// began (Unix nanoseconds, 0: none yet).
type epochs struct {
	n  [2]atomic.Uint64
	at [2]atomic.Int64
}

func (e *epochs) began(dir engine.Direction) {
	e.n[dir].Add(1)
	e.at[dir].Store(time.Now().UnixNano())
}

// Rekeys reports how many times the keys of direction dir (engine.Encrypt:
// this end's sending keys; engine.Decrypt: the peer's) moved to a new
// epoch on this Conn, and when they last did (the zero Time if never).
func (c *Conn) Rekeys(dir engine.Direction) (n uint64, last time.Time) {
	n = c.epochs.n[dir].Load()
	if ns := c.epochs.at[dir].Load(); ns != 0 {
		last = time.Unix(0, ns)
	}
	return n, last
}

// Traffic returns the Conn's byte counters: Options.Traffic, or its own
// if none was given.
func (c *Conn) Traffic() *Traffic { return c.traffic }
