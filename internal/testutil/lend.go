package testutil

import (
	"net"
	"sync"
	"sync/atomic"
	"unsafe"
)

// LendConn is a connection that lends what it reads, as record.Conn's
// ReadLent does, for the tests of what sits above one (tunnel/resume's
// read side, tunnel/mux's lent segments): each read of the connection
// below, of up to Size bytes, fills a buffer of its own, a frame, from
// which Read copies and ReadLent lends pieces (never spanning two
// frames). Once Read has moved past a frame and every piece lent from it
// is released, the frame is overwritten, so a holder that uses a piece
// after releasing it reads garbage and a checksum catches it. It counts
// the leases and remembers every frame, so a test can tell which bytes a
// writer got by reference (Owns).
type LendConn struct {
	net.Conn
	// Size is each frame's buffer, what a lease says it keeps; 0 is
	// 64 KiB + 64, record's bulk frame.
	Size int

	// Lent and Released count leases; LentBytes the bytes lent.
	Lent, Released, LentBytes atomic.Int64

	mu  sync.Mutex // one reader at a time; guards cur and err
	cur *lendFrame
	err error // the connection's error after the bytes it came with

	fmu    sync.Mutex   // guards frames (Owns must not wait for a read)
	frames [][2]uintptr // every frame's buffer: [start, end)
}

type lendFrame struct {
	c        *LendConn
	buf      []byte
	off, end int
	refs     atomic.Int32
}

// Release gives back a lent piece.
func (f *lendFrame) Release() {
	f.c.Released.Add(1)
	f.unref()
}

// Size is the memory a piece keeps: its frame's buffer.
func (f *lendFrame) Size() int { return cap(f.buf) }

func (f *lendFrame) unref() {
	if f.refs.Add(-1) == 0 {
		for i := range f.buf {
			f.buf[i] = 0xa5
		}
	}
}

// Outstanding is the leases not yet released.
func (c *LendConn) Outstanding() int64 { return c.Lent.Load() - c.Released.Load() }

// head returns the frame to deliver from, reading one if there is none.
func (c *LendConn) head() (*lendFrame, error) {
	if c.cur != nil {
		return c.cur, nil
	}
	if c.err != nil {
		return nil, c.err
	}
	size := c.Size
	if size == 0 {
		size = 64<<10 + 64
	}
	buf := make([]byte, size)
	n, err := c.Conn.Read(buf)
	c.err = err
	if n == 0 {
		if err == nil {
			return nil, nil
		}
		return nil, err
	}
	f := &lendFrame{c: c, buf: buf, end: n}
	f.refs.Store(1)
	c.cur = f
	base := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	c.fmu.Lock()
	c.frames = append(c.frames, [2]uintptr{base, base + uintptr(size)})
	c.fmu.Unlock()
	return f, nil
}

// take moves past k bytes of the head frame.
func (c *LendConn) take(k int) {
	c.cur.off += k
	if c.cur.off == c.cur.end {
		c.cur.unref()
		c.cur = nil
	}
}

// Read copies from the head frame.
func (c *LendConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := c.head()
	if f == nil || len(p) == 0 {
		return 0, err
	}
	k := copy(p, f.buf[f.off:f.end])
	c.take(k)
	return k, nil
}

// ReadLent lends up to most bytes of the head frame.
func (c *LendConn) ReadLent(most int) ([]byte, interface {
	Release()
	Size() int
}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := c.head()
	if f == nil || most <= 0 {
		return nil, nil, err
	}
	b := f.buf[f.off:min(f.end, f.off+most)]
	f.refs.Add(1)
	c.Lent.Add(1)
	c.LentBytes.Add(int64(len(b)))
	c.take(len(b))
	return b[:len(b):len(b)], f, nil
}

// Owns says whether p lies in a frame this connection read: bytes a
// writer was handed by reference, not a copy.
func (c *LendConn) Owns(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	c.fmu.Lock()
	defer c.fmu.Unlock()
	for _, r := range c.frames {
		if a >= r[0] && a < r[1] {
			return true
		}
	}
	return false
}
