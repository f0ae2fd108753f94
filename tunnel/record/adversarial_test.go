package record

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

// A reference implementation of the frame format, written from docs/protocol.md
// with crypto/aes, crypto/cipher and math/big only, to check the record
// layer against something independent.

func refIV(k *DirKeys, s suite.Suite, seq uint64) []byte {
	if s.Cipher.Mode == engine.CTR {
		v := new(big.Int).SetBytes(k.IV[:])
		v.Add(v, new(big.Int).Lsh(new(big.Int).SetUint64(seq), 32))
		v.Mod(v, new(big.Int).Lsh(big.NewInt(1), 128))
		iv := make([]byte, 16)
		v.FillBytes(iv)
		return iv
	}
	x := new(big.Int).SetBytes(k.IV[:])
	x.Xor(x, new(big.Int).SetUint64(seq))
	in := make([]byte, 16)
	x.FillBytes(in)
	b, _ := aes.NewCipher(k.Enc)
	iv := make([]byte, 16)
	b.Encrypt(iv, in)
	return iv
}

func refTag(k *DirKeys, seq uint64, ct []byte) []byte {
	m := hmac.New(sha256.New, k.MAC)
	binary.Write(m, binary.BigEndian, seq)
	binary.Write(m, binary.BigEndian, uint32(len(ct)))
	m.Write(ct)
	return m.Sum(nil)[:16]
}

// refSeal returns the wire frame seq carrying pt.
func refSeal(k *DirKeys, s suite.Suite, seq uint64, pt []byte) []byte {
	b, _ := aes.NewCipher(k.Enc)
	iv := refIV(k, s, seq)
	var ct []byte
	if s.Cipher.Mode == engine.CTR {
		ct = make([]byte, len(pt))
		cipher.NewCTR(b, iv).XORKeyStream(ct, pt)
	} else {
		pad := 16 - len(pt)%16
		ct = append(bytes.Clone(pt), bytes.Repeat([]byte{byte(pad)}, pad)...)
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(ct, ct)
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(len(ct)))
	out = append(out, ct...)
	return append(out, refTag(k, seq, ct)...)
}

// refOpen decodes a wire stream the way docs/protocol.md says
// a reader must: it returns the plaintext of the frames before the first
// bad one, and whether the stream ended cleanly on a frame boundary. A
// header with the top bit set starts the next epoch (refNextKeys).
func refOpen(k *DirKeys, s suite.Suite, maxFrame int, wire []byte) (pt []byte, clean bool) {
	b, _ := aes.NewCipher(k.Enc)
	for seq, epoch := uint64(0), uint64(0); ; seq++ {
		if len(wire) == 0 {
			return pt, true
		}
		if len(wire) < 4 {
			return pt, false
		}
		hdr := binary.BigEndian.Uint32(wire)
		if hdr>>31 == 1 {
			epoch++
			nk := refNextKeys(k, s, epoch)
			k, seq = &nk, 0
			b, _ = aes.NewCipher(k.Enc)
		}
		n := int(hdr & (1<<31 - 1))
		if n == 0 || n > maxFrame || (s.Cipher.Mode == engine.CBC && n%16 != 0) || len(wire) < 4+n+16 {
			return pt, false
		}
		ct, tag := wire[4:4+n], wire[4+n:4+n+16]
		m := hmac.New(sha256.New, k.MAC)
		binary.Write(m, binary.BigEndian, seq)
		m.Write(wire[:4+n])
		if !hmac.Equal(m.Sum(nil)[:16], tag) {
			return pt, false
		}
		iv := refIV(k, s, seq)
		p := make([]byte, n)
		if s.Cipher.Mode == engine.CTR {
			cipher.NewCTR(b, iv).XORKeyStream(p, ct)
		} else {
			cipher.NewCBCDecrypter(b, iv).CryptBlocks(p, ct)
			pad := int(p[n-1])
			if pad == 0 || pad > 16 || !bytes.Equal(p[n-pad:], bytes.Repeat([]byte{byte(pad)}, pad)) {
				return pt, false
			}
			p = p[:n-pad]
		}
		pt = append(pt, p...)
		wire = wire[4+n+16:]
	}
}

func readRawFrame(r io.Reader) ([]byte, error) {
	hdr := make([]byte, 4)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr)
	f := make([]byte, 4+n+16)
	copy(f, hdr)
	_, err := io.ReadFull(r, f[4:])
	return f, err
}

// captured sends msgs through a fresh Conn, one frame each, and returns the
// raw frames, the sender's keys and the receiver's keys.
func captured(t *testing.T, s suite.Suite, ka, kb Keys, msgs [][]byte) [][]byte {
	t.Helper()
	c1, m1 := net.Pipe()
	a, err := New(c1, ka, s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		m1.Close()
		a.Close()
	}()
	var frames [][]byte
	for i, m := range msgs {
		if _, err := a.Write(m); err != nil {
			t.Fatal(err)
		}
		f, err := readRawFrame(m1)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		frames = append(frames, f)
	}
	return frames
}

// receive feeds wire to a fresh receiving Conn, keeping the raw side open
// unless closeAfter, and returns what Read delivered and its final error.
func receive(t *testing.T, s suite.Suite, kb Keys, wire []byte, closeAfter bool) (*Conn, []byte, error) {
	t.Helper()
	return receiveWith(t, s, kb, wire, closeAfter, false)
}

// receiveWith is receive, reading with ReadLent (each piece copied out
// and released at once) if lend.
func receiveWith(t *testing.T, s suite.Suite, kb Keys, wire []byte, closeAfter, lend bool) (*Conn, []byte, error) {
	t.Helper()
	m2, c2 := net.Pipe()
	b, err := New(c2, kb, s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m2.Write(wire)
		if closeAfter {
			m2.Close()
		}
	}()
	t.Cleanup(func() {
		m2.Close()
		b.Close()
		wg.Wait()
	})
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	buf := make([]byte, 700)
	for {
		if lend {
			p, l, err := b.ReadLent(len(buf))
			got = append(got, p...)
			if l != nil {
				l.Release()
			}
			if err != nil {
				return b, got, err
			}
			continue
		}
		n, err := b.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return b, got, err
		}
	}
}

func testMessages(t *testing.T, n int) [][]byte {
	var msgs [][]byte
	for i := range n {
		msgs = append(msgs, randBytes(t, 100+37*i))
	}
	return msgs
}

func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0x10
	return b
}

func header(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

func TestTampering(t *testing.T) {
	type tc struct {
		name       string
		mutate     func(f [][]byte) []byte // wire built from the captured frames
		closeAfter bool
		good       int   // messages delivered before the failure
		want       error // nil: io.EOF
	}
	cat := func(fs ...[]byte) []byte { return bytes.Join(fs, nil) }
	cases := []tc{
		{"intact then EOF", func(f [][]byte) []byte { return cat(f...) }, true, 5, nil},
		{"ciphertext bit", func(f [][]byte) []byte { return cat(f[0], f[1], flip(f[2], 10), f[3], f[4]) }, false, 2, ErrAuth},
		{"tag bit", func(f [][]byte) []byte { return cat(f[0], f[1], flip(f[2], len(f[2])-1), f[3], f[4]) }, false, 2, ErrAuth},
		{"length +16", func(f [][]byte) []byte {
			g := bytes.Clone(f[2])
			binary.BigEndian.PutUint32(g, binary.BigEndian.Uint32(g)+16)
			return cat(f[0], f[1], g, f[3], f[4])
		}, false, 2, ErrAuth},
		{"length -16", func(f [][]byte) []byte {
			g := bytes.Clone(f[2])
			binary.BigEndian.PutUint32(g, binary.BigEndian.Uint32(g)-16)
			return cat(f[0], f[1], g, f[3], f[4])
		}, false, 2, ErrAuth},
		{"length high bit", func(f [][]byte) []byte { return cat(f[0], f[1], flip(f[2], 0), f[3], f[4]) }, false, 2, ErrFrameTooLarge},
		{"replayed frame", func(f [][]byte) []byte { return cat(f[0], f[1], f[1], f[2], f[3]) }, false, 2, ErrAuth},
		{"replayed first frame", func(f [][]byte) []byte { return cat(f[0], f[0]) }, false, 1, ErrAuth},
		{"swapped frames", func(f [][]byte) []byte { return cat(f[0], f[1], f[3], f[2], f[4]) }, false, 2, ErrAuth},
		{"dropped frame", func(f [][]byte) []byte { return cat(f[0], f[1], f[3], f[4]) }, false, 2, ErrAuth},
		{"truncated body then EOF", func(f [][]byte) []byte { return cat(f[0], f[1], f[2][:len(f[2])/2]) }, true, 2, io.ErrUnexpectedEOF},
		{"truncated tag then EOF", func(f [][]byte) []byte { return cat(f[0], f[1], f[2][:len(f[2])-1]) }, true, 2, io.ErrUnexpectedEOF},
		{"truncated header then EOF", func(f [][]byte) []byte { return cat(f[0], f[1], f[2][:2]) }, true, 2, io.ErrUnexpectedEOF},
		{"clean EOF between frames", func(f [][]byte) []byte { return cat(f[0], f[1]) }, true, 2, nil},
		// The body of these frames never comes; the reader must decide from
		// the header alone.
		{"length over max", func(f [][]byte) []byte { return cat(f[0], f[1], header(DefaultMaxFrame+16)) }, false, 2, ErrFrameTooLarge},
		{"length over hard cap", func(f [][]byte) []byte { return cat(f[0], f[1], header(0xffffffff)) }, false, 2, ErrFrameTooLarge},
		{"zero length", func(f [][]byte) []byte { return cat(f[0], f[1], header(0)) }, false, 2, ErrBadLength},
	}
	for _, s := range []suite.Suite{ctr256, cbc128} {
		cs := cases
		if s.Cipher.Mode == engine.CBC {
			cs = append(cs, tc{"CBC length not a multiple of 16", func(f [][]byte) []byte { return cat(f[0], f[1], header(33)) }, false, 2, ErrBadLength})
		}
		for _, c := range cs {
			for _, lend := range []bool{false, true} {
				name := s.Cipher.String() + "/" + c.name
				if lend {
					name += "/lent" // ReadLent lends what Read would deliver, no more
				}
				t.Run(name, func(t *testing.T) {
					ka, kb := keyPair(t, s)
					msgs := testMessages(t, 5)
					frames := captured(t, s, ka, kb, msgs)
					start := time.Now()
					b, got, err := receiveWith(t, s, kb, c.mutate(frames), c.closeAfter, lend)
					if want := bytes.Join(msgs[:c.good], nil); !bytes.Equal(got, want) {
						t.Fatalf("delivered %d bytes, want exactly the %d bytes of the %d good frames", len(got), len(want), c.good)
					}
					if c.want == nil {
						if err != io.EOF {
							t.Fatalf("got %v, want io.EOF", err)
						}
						return
					}
					if !errors.Is(err, c.want) {
						t.Fatalf("got %v, want %v", err, c.want)
					}
					if errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > 3*time.Second {
						t.Fatalf("reader waited for bytes it should not need (%v)", time.Since(start))
					}
					// The link is closed: writes fail too, and reads stay failed.
					// (Err is the first failure detected, which may be a later
					// frame's: parallel workers and the reader race to it.)
					if b.Err() == nil {
						t.Error("link still up after a failure")
					}
					if _, err := b.Write([]byte("x")); err == nil {
						t.Error("Write succeeded on a failed link")
					}
					if n, err := b.Read(make([]byte, 10)); n != 0 || !errors.Is(err, c.want) {
						t.Errorf("second Read: %d, %v", n, err)
					}
					if c.want == ErrAuth && b.Stats().AuthFailures.Load() == 0 {
						t.Error("auth failure not counted")
					}
				})
			}
		}
	}
}

// A CBC frame with a valid tag but bad padding fails with ErrPadding.
func TestBadPadding(t *testing.T) {
	s := cbc256
	ka, kb := keyPair(t, s)
	good := refSeal(&ka.Send, s, 0, []byte("first frame"))
	// Frame 1: 32 bytes of "plaintext" whose last byte claims 0x20 of padding.
	blk, _ := aes.NewCipher(ka.Send.Enc)
	pt := bytes.Repeat([]byte{0x20}, 32)
	ct := make([]byte, 32)
	cipher.NewCBCEncrypter(blk, refIV(&ka.Send, s, 1)).CryptBlocks(ct, pt)
	bad := append(header(32), ct...)
	bad = append(bad, refTag(&ka.Send, 1, ct)...)
	_, got, err := receive(t, s, kb, append(good, bad...), false)
	if string(got) != "first frame" || !errors.Is(err, ErrPadding) {
		t.Fatalf("got %q, %v; want the first frame, then ErrPadding", got, err)
	}
}

// headerOnlyConn serves one frame header and flags any further Read.
type headerOnlyConn struct {
	net.Conn // nil: only the methods below are used
	hdr      []byte
	mu       sync.Mutex
	extra    bool
	closed   chan struct{}
}

func (c *headerOnlyConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.hdr) > 0 {
		n := copy(p, c.hdr)
		c.hdr = c.hdr[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.extra = true
	c.mu.Unlock()
	<-c.closed
	return 0, net.ErrClosed
}
func (c *headerOnlyConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *headerOnlyConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return nil
}
func (c *headerOnlyConn) RemoteAddr() net.Addr { return nil }

// An oversized length is refused from the header alone: no further read,
// no buffer for the body.
func TestOversizedHeaderNotRead(t *testing.T) {
	for _, n := range []uint32{DefaultMaxFrame + 16, HardMaxFrame, 0xffffffff} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			conn := &headerOnlyConn{hdr: header(n), closed: make(chan struct{})}
			_, kb := keyPair(t, ctr256)
			b, err := New(conn, kb, ctr256, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			b.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := b.Read(make([]byte, 10)); !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("got %v, want ErrFrameTooLarge", err)
			}
			conn.mu.Lock()
			defer conn.mu.Unlock()
			if conn.extra {
				t.Fatal("reader asked for more than the header")
			}
		})
	}
	// checkLen itself allocates nothing on the good path.
	c := &Conn{maxFrame: DefaultMaxFrame, suite: cbc128}
	if a := testing.AllocsPerRun(100, func() { _ = c.checkLen(4096) }); a != 0 {
		t.Fatalf("checkLen allocates %v times", a)
	}
}

// The wire format matches the independent reference byte for byte, for
// every suite and for S_iv values whose counters carry across the 64-bit
// boundary inside a frame (low half near 2^64-1) and between frames
// (seq·2^32 overflowing the low half).
func TestWireFormatAndCounterCarry(t *testing.T) {
	ivs := map[string][16]byte{
		"random": {},
		"carry inside frame 0": func() (iv [16]byte) {
			binary.BigEndian.PutUint64(iv[:8], 0x0123456789abcdef)
			binary.BigEndian.PutUint64(iv[8:], ^uint64(0)-2) // 3 blocks before the carry
			return
		}(),
		"carry between frames": func() (iv [16]byte) {
			binary.BigEndian.PutUint64(iv[:8], ^uint64(0))                   // the high half wraps too
			binary.BigEndian.PutUint64(iv[8:], ^uint64(0)-(1<<33)+(1<<32)+5) // frame 1 starts past 2^64
			return
		}(),
	}
	for name, iv := range ivs {
		for _, s := range suites {
			t.Run(name+"/"+s.Cipher.String(), func(t *testing.T) {
				ka, kb := keyPair(t, s)
				if iv != ([16]byte{}) {
					ka.Send.IV, kb.Recv.IV = iv, iv
				}
				msgs := [][]byte{randBytes(t, 4000), randBytes(t, 4000), randBytes(t, 1), randBytes(t, 16), randBytes(t, DefaultMaxFrame-1)}
				frames := captured(t, s, ka, kb, msgs)
				for i, f := range frames {
					if want := refSeal(&ka.Send, s, uint64(i), msgs[i]); !bytes.Equal(f, want) {
						t.Fatalf("frame %d differs from the reference", i)
					}
				}
				_, got, err := receive(t, s, kb, bytes.Join(frames, nil), true)
				if err != io.EOF || !bytes.Equal(got, bytes.Join(msgs, nil)) {
					t.Fatalf("receiver: %v, %d bytes", err, len(got))
				}
			})
		}
	}
	// The worker's IV computation against the reference for large seq.
	for _, s := range []suite.Suite{ctr128, cbc128} {
		k := randDirKeys(t, s)
		binary.BigEndian.PutUint64(k.IV[8:], ^uint64(0)-7)
		c := &Conn{suite: s, opt: Options{Engines: []engine.Engine{engine.Software{}}}}
		w := testWorker(c, engine.Encrypt, &k)
		for _, seq := range []uint64{0, 1, 1<<32 - 1, 1 << 32, MaxFrames - 1, 1<<63 + 12345, ^uint64(0)} {
			if err := w.frameIV(seq); err != nil {
				t.Fatal(err)
			}
			if want := refIV(&k, s, seq); !bytes.Equal(w.iv[:], want) {
				t.Fatalf("%v seq %d: IV %x, want %x", s.Cipher, seq, w.iv, want)
			}
		}
		w.close()
	}
}
