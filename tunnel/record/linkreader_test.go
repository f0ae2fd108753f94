package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
)

// pieceConn serves a byte stream in pieces of at most piece bytes and
// counts the bytes it wrote into ahead (the reader's read-ahead buffer).
type pieceConn struct {
	net.Conn
	data      []byte
	piece     int
	ahead     []byte
	intoAhead int
}

func (p *pieceConn) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), p.piece)], p.data)
	p.data = p.data[n:]
	if len(p.ahead) > 0 && &b[0] == &p.ahead[0] {
		p.intoAhead += n
	}
	return n, nil
}

func frameStream(sizes []int) []byte {
	var stream []byte
	for i, n := range sizes {
		var h [HeaderSize]byte
		binary.BigEndian.PutUint32(h[:], uint32(n))
		stream = append(append(stream, h[:]...), bytes.Repeat([]byte{byte(i + 1)}, n)...)
	}
	return stream
}

// Frames of every size come out whole, however the link cuts the bytes,
// and the link's end after the last one is a clean io.EOF.
func TestLinkReader(t *testing.T) {
	sizes := []int{1, 3, 100, 2000, 16 << 10, 40 << 10, 64 << 10, 64 << 10, 5, 64 << 10, 7, 9, 33 << 10, 4, 1 << 20, 2}
	stream := frameStream(sizes)
	for _, piece := range []int{1, 3, 4096, 50 << 10, 1 << 20, 4 << 20} {
		l := &linkReader{conn: &pieceConn{data: stream, piece: piece}, buf: make([]byte, readBufSize)}
		readFrames(t, l, sizes, piece)
	}
}

// readFrames reads frameStream(sizes) through l, checking each frame's
// length and body, then a clean io.EOF; piece names the case in errors.
func readFrames(t *testing.T, l *linkReader, sizes []int, piece int) {
	t.Helper()
	for i, n := range sizes {
		var h [HeaderSize]byte
		if err := l.header(h[:]); err != nil {
			t.Fatalf("piece %d, frame %d: header: %v", piece, i, err)
		}
		if got := int(binary.BigEndian.Uint32(h[:])); got != n {
			t.Fatalf("piece %d, frame %d: length %d, want %d", piece, i, got, n)
		}
		body := make([]byte, n)
		if err := l.body(body); err != nil {
			t.Fatalf("piece %d, frame %d: body: %v", piece, i, err)
		}
		if !bytes.Equal(body, bytes.Repeat([]byte{byte(i + 1)}, n)) {
			t.Fatalf("piece %d, frame %d: body changed", piece, i)
		}
	}
	var h [HeaderSize]byte
	if err := l.header(h[:]); err != io.EOF {
		t.Fatalf("piece %d: after the last frame: %v, want io.EOF", piece, err)
	}
}

// Bulk frames are not read ahead: past the first read, headers are read
// exactly and bodies straight into the frame, so no body is copied out of
// the read-ahead buffer again. (A bufio.Reader of the same size copied
// about half of every 64 KiB body.)
func TestLinkReaderBulkNoCopy(t *testing.T) {
	sizes := make([]int, 20)
	for i := range sizes {
		sizes[i] = 64 << 10
	}
	buf := make([]byte, readBufSize)
	pc := &pieceConn{data: frameStream(sizes), piece: 1 << 30, ahead: buf}
	l := &linkReader{conn: pc, buf: buf}
	body := make([]byte, 64<<10)
	for i := range sizes {
		var h [HeaderSize]byte
		if err := l.header(h[:]); err != nil {
			t.Fatal(err)
		}
		if err := l.body(body); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if pc.intoAhead > readBufSize {
		t.Fatalf("%d bytes of %d went through the read-ahead buffer, want at most the first read's %d", pc.intoAhead, 20*(64<<10), readBufSize)
	}
}

// A link that ends inside a header or a body is a truncation, never a
// clean end.
func TestLinkReaderTruncated(t *testing.T) {
	frame := append([]byte{0, 0, 0, 10}, bytes.Repeat([]byte{1}, 10)...)
	for cut := 1; cut < len(frame); cut++ {
		for _, bulk := range []bool{false, true} {
			l := &linkReader{conn: &pieceConn{data: frame[:cut], piece: 3}, buf: make([]byte, readBufSize), bulk: bulk}
			var h [HeaderSize]byte
			err := l.header(h[:])
			if err == nil {
				err = l.body(make([]byte, 10))
			}
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("cut at %d (bulk %v): %v, want io.ErrUnexpectedEOF", cut, bulk, err)
			}
		}
	}
}

// resetConn serves data, then fails every read with a reset.
type resetConn struct{ pieceConn }

func (r *resetConn) Read(b []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return r.pieceConn.Read(b)
}

// A reset before a byte of the next header is a hang-up (ErrPeerReset);
// one inside a header or a body is not, after small frames (read ahead)
// and after a bulk one (read straight) alike.
func TestLinkReaderReset(t *testing.T) {
	for _, last := range []int{100, 64 << 10} {
		whole := frameStream([]int{10, last})
		for _, tc := range []struct {
			name  string
			data  []byte
			reset bool // want ErrPeerReset
		}{
			{"between frames", whole, true},
			{"inside a header", append(append([]byte(nil), whole...), 0, 0), false},
			{"inside a body", whole[:len(whole)-1], false},
		} {
			l := &linkReader{conn: &resetConn{pieceConn{data: tc.data, piece: 4096}}, buf: make([]byte, readBufSize)}
			var err error
			for err == nil {
				var h [HeaderSize]byte
				if err = l.header(h[:]); err == nil {
					err = l.body(make([]byte, binary.BigEndian.Uint32(h[:])))
				}
			}
			if got := errors.Is(err, ErrPeerReset); got != tc.reset || !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("last frame %d B, reset %s: %v; want ErrPeerReset %v, wrapping ECONNRESET", last, tc.name, err, tc.reset)
			}
		}
	}
}
