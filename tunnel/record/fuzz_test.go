package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/suite"
)

// byteConn is a net.Conn whose peer sent wire and closed.
type byteConn struct {
	mu sync.Mutex
	r  *bytes.Reader
}

func (c *byteConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.r.Read(p)
}
func (c *byteConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *byteConn) Close() error                     { return nil }
func (c *byteConn) LocalAddr() net.Addr              { return nil }
func (c *byteConn) RemoteAddr() net.Addr             { return nil }
func (c *byteConn) SetDeadline(time.Time) error      { return nil }
func (c *byteConn) SetReadDeadline(time.Time) error  { return nil }
func (c *byteConn) SetWriteDeadline(time.Time) error { return nil }

// fuzzKeys are fixed so that the corpus can hold valid frames.
func fuzzKeys(s suite.Suite) DirKeys {
	k := DirKeys{Enc: bytes.Repeat([]byte{0x11}, s.Cipher.KeySize()), MAC: bytes.Repeat([]byte{0x22}, MACKeySize)}
	copy(k.IV[:], bytes.Repeat([]byte{0x33}, 16))
	binary.BigEndian.PutUint64(k.IV[8:], ^uint64(0)-1)
	return k
}

// FuzzReader feeds arbitrary bytes as the wire to a Conn with fixed keys.
// Whatever they are, the Conn must not panic, and must deliver exactly what
// the reference decoder delivers: the plaintext of the frames before the
// first one that fails, never a byte of a frame whose tag did not verify.
func FuzzReader(f *testing.F) {
	suites := []suite.Suite{ctr256, cbc128}
	for i, s := range suites {
		k := fuzzKeys(s)
		f0 := refSeal(&k, s, 0, []byte("hello, frame zero"))
		f1 := refSeal(&k, s, 1, bytes.Repeat([]byte{7}, 300))
		f2 := refSeal(&k, s, 2, []byte{})
		f.Add(uint8(i), append(append(bytes.Clone(f0), f1...), f2...))
		f.Add(uint8(i), append(bytes.Clone(f0), f0...))
		f.Add(uint8(i), f1)
		f.Add(uint8(i), f0[:len(f0)-3])
		f.Add(uint8(i), header(0xffffffff))
		// Epochs 1 and 2 (rekey), and epoch 0's keys after the switch.
		k1 := refNextKeys(&k, s, 1)
		k2 := refNextKeys(&k1, s, 2)
		r1 := refSealNew(&k1, s, 0, []byte("epoch one"))
		f.Add(uint8(i), append(append(append(bytes.Clone(f0), r1...), refSeal(&k1, s, 1, f1[4:40])...), refSealNew(&k2, s, 0, []byte("two"))...))
		f.Add(uint8(i), append(append(bytes.Clone(f0), r1...), refSeal(&k, s, 1, []byte("old keys"))...))
		f.Add(uint8(i), append(bytes.Clone(f0), header(epochFlag|64)...))
	}
	const maxFrame = 1024
	f.Fuzz(func(t *testing.T, which uint8, wire []byte) {
		s := suites[int(which)%len(suites)]
		k := fuzzKeys(s)
		want, clean := refOpen(&k, s, maxFrame, wire)
		c, err := New(&byteConn{r: bytes.NewReader(wire)}, Keys{Send: k, Recv: k}, s, Options{MaxFrame: maxFrame, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var got []byte
		buf := make([]byte, 97)
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if err == nil {
				continue
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("delivered %d bytes, reference %d (err %v)", len(got), len(want), err)
			}
			if clean != (err == io.EOF) {
				t.Fatalf("clean end %v, but Read returned %v", clean, err)
			}
			if !clean && !errors.Is(err, ErrAuth) && !errors.Is(err, ErrBadLength) && !errors.Is(err, ErrFrameTooLarge) &&
				!errors.Is(err, ErrPadding) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
	})
}
