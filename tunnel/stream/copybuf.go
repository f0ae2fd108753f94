package stream

import (
	"sync"
	"sync/atomic"
)

// Copy buffers, for the up direction only (local → stream), and only
// where up can not read into the link's frame (copyUpInPlace: a local
// connection that is not a bare TCP socket, or a stream not over the
// record layer): down writes the stream's receive segments to the local
// connection itself (splice.go, tunnel/mux CopyTo), on the record layer
// the opened frames themselves, lent (tunnel/mux segment.go), so a bulk
// byte is not copied in user space on its way down. An idle stream holds none: up waits
// for data without one and gives its buffer back after a short read, so
// only a stream with bytes moving holds one. A stream that fills its small
// buffer on every read is moving bulk data, and takes a big one
// (MaxChunk) while one is free: a quarter of the local reads and frames
// per byte. Big buffers are capped per server or client (maxBigBuffers):
// many bulk streams cost at most 512 KiB more here.
const (
	smallChunk    = 16 << 10
	maxBigBuffers = 8
)

type (
	smallBuffer = [ChunkHeader + smallChunk]byte
	bigBuffer   = [ChunkHeader + MaxChunk]byte
)

// BufPool pools the copy buffers of one server or client.
type BufPool struct {
	small, big sync.Pool
	bigOut     atomic.Int32 // big buffers out now
	maxBig     int32
}

func NewBufPool() *BufPool {
	return &BufPool{
		small:  sync.Pool{New: func() any { return new(smallBuffer) }},
		big:    sync.Pool{New: func() any { return new(bigBuffer) }},
		maxBig: maxBigBuffers,
	}
}

// copyBuf is one direction's buffer: chunk header room, then data.
type copyBuf struct {
	pool  *BufPool
	b     []byte
	small *smallBuffer
	big   *bigBuffer
}

func (p *BufPool) get() *copyBuf {
	s := p.small.Get().(*smallBuffer)
	return &copyBuf{pool: p, b: s[:], small: s}
}

// data is the room for a chunk's data.
func (c *copyBuf) data() []byte { return c.b[ChunkHeader:] }

// adapt moves to a big buffer after a chunk that filled the small one
// (while the pool has one to give) and back to a small one after a chunk
// well under a small buffer, so only streams moving bulk data hold big
// ones. n is the chunk just copied.
func (c *copyBuf) adapt(n int) {
	switch {
	case c.big == nil && n >= smallChunk:
		p := c.pool
		if p.bigOut.Add(1) > p.maxBig {
			p.bigOut.Add(-1)
			return
		}
		c.big = p.big.Get().(*bigBuffer)
		c.b = c.big[:]
		p.small.Put(c.small)
		c.small = nil
	case c.big != nil && n < smallChunk/2:
		c.small = c.pool.small.Get().(*smallBuffer)
		c.b = c.small[:]
		c.pool.putBig(c.big)
		c.big = nil
	}
}

func (p *BufPool) putBig(b *bigBuffer) {
	p.big.Put(b)
	p.bigOut.Add(-1)
}

// release gives the buffer back.
func (c *copyBuf) release() {
	if c.big != nil {
		c.pool.putBig(c.big)
	} else {
		c.pool.small.Put(c.small)
	}
	c.big, c.small, c.b = nil, nil, nil
}
