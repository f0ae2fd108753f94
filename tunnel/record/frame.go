package record

import (
	"sync"
	"sync/atomic"
)

// Frame buffers come from pools of fixed-size arrays (wireguard-go's
// device/pools.go): a small class for the short frames of an idle link and
// classes up to the hard cap for bulk. A buffer holds a whole wire frame,
// header | ciphertext | tag, plus room for CBC padding.
const (
	classSmall = 2 << 10
	class16K   = 16<<10 + 64
	class64K   = 64<<10 + 64
	class256K  = 256<<10 + 64
	class1M    = HardMaxFrame + 64
)

var (
	poolSmall = sync.Pool{New: func() any { return new([classSmall]byte) }}
	pool16K   = sync.Pool{New: func() any { return new([class16K]byte) }}
	pool64K   = sync.Pool{New: func() any { return new([class64K]byte) }}
	pool256K  = sync.Pool{New: func() any { return new([class256K]byte) }}
	pool1M    = sync.Pool{New: func() any { return new([class1M]byte) }}
)

// getBuf returns a buffer of at least n bytes (n ≤ class1M).
func getBuf(n int) []byte {
	switch {
	case n <= classSmall:
		return poolSmall.Get().(*[classSmall]byte)[:]
	case n <= class16K:
		return pool16K.Get().(*[class16K]byte)[:]
	case n <= class64K:
		return pool64K.Get().(*[class64K]byte)[:]
	case n <= class256K:
		return pool256K.Get().(*[class256K]byte)[:]
	}
	return pool1M.Get().(*[class1M]byte)[:]
}

// putBuf returns a buffer from getBuf to its pool.
func putBuf(b []byte) {
	switch cap(b) {
	case classSmall:
		poolSmall.Put((*[classSmall]byte)(b[:classSmall]))
	case class16K:
		pool16K.Put((*[class16K]byte)(b[:class16K]))
	case class64K:
		pool64K.Put((*[class64K]byte)(b[:class64K]))
	case class256K:
		pool256K.Put((*[class256K]byte)(b[:class256K]))
	case class1M:
		pool1M.Put((*[class1M]byte)(b[:class1M]))
	}
}

// wireSize is the buffer a frame of ciphertext length n needs.
func wireSize(n int) int { return HeaderSize + n + TagSize }

// frame is one frame in flight. The goroutine that queued it hands it to a
// worker and to the in-order consumer (sender or Read); the worker signals
// done once, after which only the consumer touches it.
type frame struct {
	buf  []byte // wire frame: header | ciphertext | tag
	ep   *epoch // keys of the frame's epoch, held until a worker is done (rekey.go)
	seq  uint64 // in its epoch
	flag uint32 // epochFlag on the first frame of an epoch (sealing)
	n    int    // plaintext bytes (sealing) or ciphertext bytes (opening)
	err  error  // why the frame failed; or io.EOF / a marker
	mark mark
	done chan struct{} // capacity 1: the worker's one signal
	seen bool          // done received (consumer only)

	// Opened plaintext is buf[off:end].
	off, end int

	// refs counts who holds an opened frame once Read took it: Read's
	// own reference while it delivers from it, plus one per piece lent
	// (ReadLent) not yet released. The last one recycles the frame.
	refs atomic.Int32
}

// unref drops a reference to a frame Read took; the last one recycles it.
func (f *frame) unref() {
	if f.refs.Add(-1) == 0 {
		putFrame(f)
	}
}

// Release gives back a piece of plaintext ReadLent lent: the frame's
// buffer goes back to its pool once Read and every piece are done with it.
func (f *frame) Release() { f.unref() }

// Size is the memory a lent piece keeps from being recycled: the frame's
// whole buffer.
func (f *frame) Size() int { return cap(f.buf) }

type mark uint8

const (
	markNone  mark = iota
	markClose      // writer: everything before was sent; stop
	markEnd        // reader: the stream ended (err says how)
)

var framePool = sync.Pool{New: func() any { return &frame{done: make(chan struct{}, 1)} }}

func getFrame(bufSize int) *frame {
	f := framePool.Get().(*frame)
	if bufSize > 0 {
		f.buf = getBuf(bufSize)
	}
	return f
}

// putFrame recycles f; only once its worker is done with it.
func putFrame(f *frame) {
	if f.buf != nil {
		putBuf(f.buf)
	}
	if f.ep != nil {
		f.ep.release()
	}
	*f = frame{done: f.done}
	framePool.Put(f)
}

// newMarker returns a frame that needs no worker: done is already signaled.
func newMarker(m mark, err error) *frame {
	f := getFrame(0)
	f.mark, f.err = m, err
	f.done <- struct{}{}
	return f
}

// waitDone waits for f's worker, or reports false if block is false and
// it is not done yet. Only f's consumer calls it.
func (f *frame) ready(block bool) bool {
	if f.seen {
		return true
	}
	if block {
		<-f.done
	} else {
		select {
		case <-f.done:
		default:
			return false
		}
	}
	f.seen = true
	return true
}
