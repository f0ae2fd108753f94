package record

import (
	"bytes"
	"io"
	"testing"
	"unsafe"
)

// ReadLent lends a piece of the opened frame itself, not a copy, and the
// frame stays out of the pool while the piece is held, however many frames
// Read goes on to deliver; mixed with Read, the bytes come in order.
func TestReadLentKeepsFrame(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			c1, c2 := tr.pair(t)
			a, b := newPair(t, c1, c2, ctr256, Options{}, Options{})
			const frames, size = 64, DefaultMaxFrame - 64
			sent := make([]byte, frames*size)
			for i := range sent {
				sent[i] = byte(i*7 + i>>16)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := a.Write(sent)
				errc <- err
			}()
			p, l, err := b.ReadLent(len(sent))
			if err != nil {
				t.Fatal(err)
			}
			f, ok := l.(*frame)
			if !ok {
				t.Fatalf("lease %T, want the frame", l)
			}
			start := uintptr(unsafe.Pointer(unsafe.SliceData(f.buf)))
			if at := uintptr(unsafe.Pointer(unsafe.SliceData(p))); at < start || at >= start+uintptr(cap(f.buf)) {
				t.Fatal("the piece is not in the frame's buffer: a copy")
			}
			if l.Size() != cap(f.buf) || cap(p) != len(p) {
				t.Fatalf("Size %d, piece cap %d len %d: want the frame's buffer and a piece that can not grow into it", l.Size(), cap(p), len(p))
			}
			held := bytes.Clone(p)
			rest := make([]byte, len(sent)-len(p))
			if _, err := io.ReadFull(b, rest); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, held) {
				t.Fatal("a lent piece changed while it was held: its frame was recycled under it")
			}
			l.Release()
			if !bytes.Equal(append(held, rest...), sent) {
				t.Fatal("ReadLent and Read delivered other bytes than were sent")
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}
