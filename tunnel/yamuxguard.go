package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/offload-dev/offload/tunnel/record"
)

/* hashicorp/yamux v0.1.2, which the tunnel ran on before tunnel/mux,
   answers every ping a peer sends from a goroutine of its own
   (Session.handlePing), which waits up to
   ConnectionWriteTimeout (10 s) for room in the send queue and then logs a
   line. A peer that holds the keys can send pings as fast as it can seal
   them (12 bytes each, thousands per frame) and stop reading the replies:
   the queue stays full and every ping holds a goroutine and its stack for
   10 s, then logs. Measured before this guard (TestAttackPingFlood): 3 s of
   pings left the server with 18,000 goroutines, +22 MiB of heap, the link
   up, and a warn line per ping afterwards.

   pingGuard sits between the record layer and yamux and reads the yamux
   frame headers as they pass (nothing is copied or changed): a peer may
   send pingBurst pings at once and pingRate a second after that, which is
   a keepalive every 1/pingRate s or slower; one more cuts the link with
   errPingFlood. A peer's yamux sends one ping per keepalive interval
   (offload sends no others), so only a misbehaving peer is cut. tunnel/mux
   answers pings from its one control queue (no goroutine per ping), which
   a peer that does not read fills until the session closes; the guard
   still cuts a flooding peer at once, whichever yamux is on either end. */

const (
	pingBurst = 64
	pingRate  = 16 // per second
)

// MinKeepalive (625 ms) is the shortest keepalive interval Options take:
// ten times the interval the peer's guard allows (1/pingRate s), and far
// below any use (the default is 15 s).
const MinKeepalive = 10 * time.Second / pingRate

// errPingFlood is the error of a link cut for a ping flood.
var errPingFlood = errors.New("peer flooded yamux pings")

// yamux's frame header (hashicorp/yamux const.go): version:u8 type:u8
// flags:u16 stream:u32 length:u32; only data frames carry length bytes.
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
	yamuxTypePing   = 2
	yamuxFlagSYN    = 1
)

// pingGuard is the net.Conn yamux runs on: the record layer's Conn with
// Read watched.
type pingGuard struct {
	*record.Conn

	// Read's, one Read at a time (yamux's receive loop).
	hdr    [yamuxHeaderSize]byte
	have   int    // header bytes collected
	skip   uint64 // data body bytes still to pass
	tokens float64
	last   time.Time

	mu  sync.Mutex
	err error
}

func newPingGuard(rc *record.Conn) *pingGuard {
	return &pingGuard{Conn: rc, tokens: pingBurst, last: time.Now()}
}

// Read implements net.Conn.
func (g *pingGuard) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	if n > 0 && !g.watch(p[:n]) {
		g.mu.Lock()
		if g.err == nil {
			g.err = fmt.Errorf("%w: more than %d at once or %d a second", errPingFlood, pingBurst, pingRate)
		}
		g.mu.Unlock()
		// yamux's receive loop ends on the error and closes the
		// session, which closes the link.
		return 0, g.Err()
	}
	return n, err
}

// watch follows the frames in b; false means a ping over the limit.
func (g *pingGuard) watch(b []byte) bool {
	for len(b) > 0 {
		if g.skip > 0 {
			k := uint64(len(b))
			if k > g.skip {
				k = g.skip
			}
			g.skip -= k
			b = b[k:]
			continue
		}
		k := copy(g.hdr[g.have:], b)
		g.have += k
		b = b[k:]
		if g.have < yamuxHeaderSize {
			return true
		}
		g.have = 0
		length := binary.BigEndian.Uint32(g.hdr[8:])
		switch g.hdr[1] {
		case yamuxTypeData:
			g.skip = uint64(length)
		case yamuxTypePing:
			if binary.BigEndian.Uint16(g.hdr[2:])&yamuxFlagSYN != 0 && !g.take() {
				return false
			}
		}
	}
	return true
}

// take spends a token of the ping bucket.
func (g *pingGuard) take() bool {
	now := time.Now()
	g.tokens = min(pingBurst, g.tokens+now.Sub(g.last).Seconds()*pingRate)
	g.last = now
	if g.tokens < 1 {
		return false
	}
	g.tokens--
	return true
}

// Err is the error that ended the link: the guard's, else the record
// layer's.
func (g *pingGuard) Err() error {
	g.mu.Lock()
	err := g.err
	g.mu.Unlock()
	if err != nil {
		return err
	}
	return g.Conn.Err()
}

var _ net.Conn = (*pingGuard)(nil)
