package record

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

// The frames in flight per direction are bounded in bytes: larger frames
// mean fewer of them, never fewer than two, never more than the worker
// bound.
func TestPipelineDepth(t *testing.T) {
	for _, c := range []struct{ maxFrame, hi, want int }{
		{16 << 10, 6, 6},  // 16 fit 256 KiB: the worker bound holds
		{64 << 10, 6, 4},  // 256 KiB / 64 KiB
		{64 << 10, 8, 4},  // the reader's bound is larger, bytes still hold
		{256 << 10, 6, 2}, // one fits: two is the floor
		{1 << 20, 8, 2},
		{1 << 10, 34, 34},
	} {
		if got := pipelineDepth(c.maxFrame, c.hi); got != c.want {
			t.Errorf("pipelineDepth(%d, %d) = %d, want %d", c.maxFrame, c.hi, got, c.want)
		}
	}
	for _, mf := range []int{16 << 10, 64 << 10, 256 << 10, HardMaxFrame} {
		d := pipelineDepth(mf, 2*MaxWorkers+4)
		if d > 2 && d*mf > pipelineBytes {
			t.Errorf("max frame %d: %d frames in flight hold %d bytes, over %d", mf, d, d*mf, pipelineBytes)
		}
	}
}

// A short Write stays in a small buffer; one that outgrows it moves to a
// full-size buffer with its bytes intact, and a bulk Write leaves full
// frames.
func TestWriterFill(t *testing.T) {
	c := &Conn{maxFrame: 64 << 10, maxPlain: 64 << 10, opt: Options{WriteBuffer: 128 << 10}}
	w := &writer{c: c}
	defer w.drain()

	head := bytes.Repeat([]byte{1}, 12)
	if k := w.fill(head); k != len(head) {
		t.Fatalf("fill took %d of %d", k, len(head))
	}
	if w.open == nil || len(w.open.buf) != classSmall || w.open.n != 12 {
		t.Fatalf("after 12 bytes: open frame %+v, want 12 bytes in a %d-byte buffer", w.open, classSmall)
	}
	body := make([]byte, 100<<10)
	for i := range body {
		body[i] = byte(i % 251)
	}
	if k := w.fill(body); k != len(body) {
		t.Fatalf("fill took %d of %d", k, len(body))
	}
	if len(w.filled) != 1 || w.filled[0].n != c.maxPlain {
		t.Fatalf("after %d bytes: %d full frames, want 1 of %d bytes", 12+len(body), len(w.filled), c.maxPlain)
	}
	want := append(append([]byte(nil), head...), body...)
	f := w.take()
	got := append([]byte(nil), f.buf[HeaderSize:HeaderSize+f.n]...)
	putFrame(f)
	g := w.take()
	got = append(got, g.buf[HeaderSize:HeaderSize+g.n]...)
	putFrame(g)
	if !bytes.Equal(got, want) {
		t.Fatal("bytes changed on the way through fill and take")
	}
	if w.buffered != 0 || w.open != nil || len(w.filled) != 0 {
		t.Fatalf("after taking everything: buffered %d, open %v, filled %d", w.buffered, w.open, len(w.filled))
	}

	// WriteBuffer bounds what fill takes.
	big := make([]byte, 300<<10)
	if k := w.fill(big); k != c.opt.WriteBuffer {
		t.Fatalf("fill took %d bytes, want the write buffer's %d", k, c.opt.WriteBuffer)
	}
	if k := w.fill(big); k != 0 {
		t.Fatalf("fill took %d bytes into a full write buffer", k)
	}
}

// Bulk through a real link with large frames: every byte arrives in
// order, and no more frames are in flight than the byte bound allows.
func TestLargeFramesBounded(t *testing.T) {
	for _, mf := range []int{64 << 10, 256 << 10, HardMaxFrame} {
		t.Run(fmt.Sprint(mf), func(t *testing.T) {
			c1, c2 := tcpPair(t)
			o := Options{MaxFrame: mf, Workers: 4, Engines: []engine.Engine{slowEngine{}, engine.Software{}}}
			a, b := newPair(t, c1, c2, ctr256, o, o)
			if got, want := cap(a.w.slots), pipelineDepth(mf, 2*4+2); got != want {
				t.Fatalf("writer holds up to %d frames, want %d", got, want)
			}
			if got, want := cap(b.r.queue), pipelineDepth(mf, 2*4+4); got != want {
				t.Fatalf("reader holds up to %d frames, want %d", got, want)
			}
			roundTrip(t, a, b, 4*mf+12345, 40<<10)
		})
	}
}

// Sealing and opening a frame allocates nothing of the record layer's, for
// every suite: at 10^5 frames/s an allocation per frame is GC work a
// router feels. The one exception is not ours: for CTR frames of 256 B or
// more on AES hardware the software engine uses crypto/cipher.NewCTR, which
// copies the key schedule into a new stream each time (about 512 B; the
// standard library has no way to reset a stream's counter). Everything
// else, CBC and short CTR frames included, must stay at zero.
func TestSealOpenNoAllocs(t *testing.T) {
	for _, s := range suite.All() {
		for _, n := range []int{100, 64 << 10} {
			sealer, opener, f := sealOpenPair(t, s, n)
			seq := uint64(0)
			var err error
			allocs := testing.AllocsPerRun(50, func() {
				if e := sealOpen(sealer, opener, f, seq, n); e != nil && err == nil {
					err = e
				}
				seq++
			})
			if err != nil {
				t.Fatalf("%s, %d bytes: %v", s, n, err)
			}
			want := 0.0
			if s.Cipher.Mode == engine.CTR && n >= 256 && engine.HardwareAES() {
				want = 2 // one cipher.NewCTR per direction
			}
			if allocs > want {
				t.Errorf("%s, %d bytes: %.1f allocations per sealed and opened frame, want %.0f", s, n, allocs, want)
			}
		}
	}
}

// WriteInPlace's room: need to most bytes, at the end of the open frame;
// a frame with less than need left is cut as it is; a fill of 0 leaves
// no buffer held; the write buffer bounds the room.
func TestWriterRoom(t *testing.T) {
	c := &Conn{maxFrame: 64 << 10, maxPlain: 64 << 10, opt: Options{WriteBuffer: 128 << 10}}
	w := &writer{c: c}
	defer w.drain()

	if b := w.room(17, 100); len(b) != 100 {
		t.Fatalf("room on an empty writer: %d bytes, want 100", len(b))
	}
	w.commit(0)
	if w.open != nil {
		t.Fatal("an empty fill left a frame open")
	}
	w.fill(make([]byte, c.maxPlain-10))
	b := w.room(17, 1<<20)
	if len(w.filled) != 1 || w.open.n != 0 {
		t.Fatalf("10 bytes left, need 17: %d full frames, open frame holds %d bytes; want a new frame", len(w.filled), w.open.n)
	}
	if len(b) != c.maxPlain {
		t.Fatalf("room %d bytes, want a whole frame's %d", len(b), c.maxPlain)
	}
	for i := range b {
		b[i] = byte(i)
	}
	w.commit(len(b))
	if want := 2*c.maxPlain - 10; w.buffered != want {
		t.Fatalf("buffered %d, want %d", w.buffered, want)
	}
	if b := w.room(11, 20); b != nil {
		t.Fatalf("room of %d bytes with 10 free in the write buffer, need 11", len(b))
	}
	w.take()
	f := w.take()
	defer putFrame(f)
	for i := range f.n {
		if f.buf[HeaderSize+i] != byte(i) {
			t.Fatalf("byte %d of the filled frame changed", i)
		}
	}
}

// patternFiller writes the next bytes of a counting pattern, sizes taken
// in turn from sizes (0: nothing this time).
type patternFiller struct {
	sizes []int
	i     int
	next  byte
	room  []int // the room each call got
}

func (p *patternFiller) Fill(b []byte) int {
	p.room = append(p.room, len(b))
	n := min(p.sizes[p.i%len(p.sizes)], len(b))
	p.i++
	for i := range n {
		b[i] = p.next
		p.next++
	}
	return n
}

// Bytes written in place and by Write arrive in order, whatever frames
// they fell in.
func TestWriteInPlace(t *testing.T) {
	c1, c2 := tcpPair(t)
	a, b := newPair(t, c1, c2, cbc128, Options{}, Options{})
	p := &patternFiller{sizes: []int{1, 0, 5000, 70000, 17, 0, 65536 - 40}}
	var want []byte
	done := make(chan []byte, 1)
	go func() {
		got, _ := io.ReadAll(io.LimitReader(b, 1<<20))
		done <- got
	}()
	for len(want) < 1<<20 {
		left := 1<<20 - len(want)
		need := min(17, left)
		n, err := a.WriteInPlace(need, min(100<<10, left), p)
		if err != nil {
			t.Fatal(err)
		}
		if r := p.room[len(p.room)-1]; r < need || r > left {
			t.Fatalf("fill got %d bytes of room, asked for %d to %d", r, need, left)
		}
		for range n {
			want = append(want, byte(len(want)))
		}
	}
	if got := <-done; !bytes.Equal(got, want) {
		t.Fatalf("received %d bytes, not the %d written in place", len(got), len(want))
	}
	if _, err := a.WriteInPlace(0, 10, p); err == nil {
		t.Fatal("WriteInPlace with need 0 accepted")
	}
}
