//go:build linux

package engine_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

func rnd(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// requireAEAD skips where the kernel has no AF_ALG at all (this machine);
// where it has AF_ALG (the VM), the authenc engine must work: the CI run
// loads authenc, so a missing one fails rather than skips.
func requireAEAD(t testing.TB, e *engine.AFALGAEAD, c engine.Cipher) engine.Driver {
	t.Helper()
	requireAFALG(t)
	d, err := e.Driver(c)
	if err != nil {
		t.Fatalf("%s %v: %v", e.Name(), c, err)
	}
	return d
}

// softFrame is the record layer's software frame body and tag for
// (seq, pt, iv): the software engine's cipher and record's HMAC-SHA256
// MAC over len | ciphertext, exactly as the record worker computes them.
func softFrame(t testing.TB, c engine.Cipher, encKey, macKey []byte, seq uint64, pt, iv []byte) []byte {
	t.Helper()
	cr, err := engine.Software{}.NewCrypter(c, encKey)
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(pt)))
	frame = append(frame, make([]byte, len(pt))...)
	if err := cr.Encrypt(frame[record.HeaderSize:], pt, iv); err != nil {
		t.Fatal(err)
	}
	m, err := record.NewMAC(suite.HMACSHA256, macKey)
	if err != nil {
		t.Fatal(err)
	}
	var tag [record.TagSize]byte
	m.Sum(&tag, seq, frame)
	return append(frame[record.HeaderSize:], tag[:]...)
}

func aadOf(seq uint64, n int) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, seq), uint32(n))
}

// TestKernelAEADFrames proves the authenc engine byte-identical to the
// record layer's software path: for every cipher, many sizes and seqs
// (across the 32-bit boundary), Seal gives the software frame's
// ciphertext | tag, Open gives back the plaintext, in place too, and a
// frame with any part tampered is rejected by the kernel as ErrAuth.
func TestKernelAEADFrames(t *testing.T) {
	e := engine.NewAFALGAEAD("", engine.Options{})
	seqs := []uint64{0, 1, 1<<32 - 1, 1 << 32, 0x0123456789abcdef}
	for _, c := range engine.Ciphers {
		t.Run(c.String(), func(t *testing.T) {
			d := requireAEAD(t, e, c)
			if d.Algorithm != engine.AuthencName(c) || !strings.HasPrefix(d.Name, "authenc(") {
				t.Errorf("driver %+v, want an authenc instance of %s", d, engine.AuthencName(c))
			}
			encKey, macKey := rnd(t, c.KeySize()), rnd(t, engine.FrameMACKeySize)
			s, err := e.NewFrameSealer(c, encKey, macKey)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Driver().Name != d.Name {
				t.Errorf("sealer driver %q, engine says %q", s.Driver().Name, d.Name)
			}
			sizes := []int{16, 32, 48, 1008, 1040, 4096, 16384, 16384 + 48, engine.MaxFrameRequest}
			if c.Mode == engine.CTR {
				sizes = append(sizes, 1, 15, 17, 1000, 16383)
			}
			for i, n := range sizes {
				seq := seqs[i%len(seqs)]
				pt, iv := rnd(t, n), rnd(t, 16)
				if i == 0 {
					// A counter that carries across the 64-bit boundary.
					copy(iv, bytes.Repeat([]byte{0xff}, 16))
					iv[0], iv[7] = 0, 0xfe
				}
				aad := aadOf(seq, n)
				want := softFrame(t, c, encKey, macKey, seq, pt, iv)
				got := make([]byte, n+engine.FrameTagSize)
				if err := s.Seal(got, aad, pt, iv); err != nil {
					t.Fatalf("seal %d bytes seq %d: %v", n, seq, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("seal %d bytes seq %d: kernel frame differs from the software frame (first bytes %x vs %x, tags %x vs %x)",
						n, seq, got[:min(16, n)], want[:min(16, n)], got[n:], want[n:])
				}
				out := make([]byte, n)
				if err := s.Open(out, aad, want, iv); err != nil || !bytes.Equal(out, pt) {
					t.Fatalf("open %d bytes seq %d: %v, plaintext equal %v", n, seq, err, bytes.Equal(out, pt))
				}
				// In place, as the record layer could.
				buf := append(bytes.Clone(pt), make([]byte, engine.FrameTagSize)...)
				if err := s.Seal(buf, aad, buf[:n], iv); err != nil || !bytes.Equal(buf, want) {
					t.Fatalf("in-place seal %d bytes: %v", n, err)
				}
				if err := s.Open(buf, aad, buf, iv); err != nil || !bytes.Equal(buf[:n], pt) {
					t.Fatalf("in-place open %d bytes: %v", n, err)
				}
				// Tampering: ciphertext, tag, seq, len.
				for _, tc := range []struct {
					name   string
					sealed []byte
					aad    []byte
				}{
					{"ciphertext", flip(want, n/2), aad},
					{"tag", flip(want, n+engine.FrameTagSize-1), aad},
					{"seq", want, aadOf(seq+1, n)},
					{"len", want, aadOf(seq, n+16)},
				} {
					err := s.Open(out, tc.aad, tc.sealed, iv)
					if !errors.Is(err, engine.ErrAuth) {
						t.Fatalf("%d bytes, tampered %s: %v, want ErrAuth", n, tc.name, err)
					}
				}
				// The op socket recovers after EBADMSG.
				if err := s.Open(out, aad, want, iv); err != nil || !bytes.Equal(out, pt) {
					t.Fatalf("open after a rejected frame: %v", err)
				}
			}
		})
	}
}

// TestKernelAEADDrivers binds authenc around every cipher driver the
// kernel registers (aesni, the virtio-crypto device, the generic template)
// with afalg-aead:DRIVER and checks its frames against software.
func TestKernelAEADDrivers(t *testing.T) {
	requireAFALG(t)
	for _, dc := range kernelDriverCases(t) {
		t.Run(dc.name, func(t *testing.T) {
			e := engine.NewAFALGAEAD(dc.name, engine.Options{})
			if !dc.ciphers[0].Valid() {
				// ECB is for measuring only: whole frames never use it,
				// and the engine must say so rather than bind it.
				for _, c := range dc.ciphers {
					if _, err := e.Driver(c); err == nil {
						t.Errorf("%v: afalg-aead bound a measuring-only cipher", c)
					}
				}
				return
			}
			for _, c := range dc.ciphers {
				d, err := e.Driver(c)
				if err != nil {
					t.Fatalf("%v: %v", c, err)
				}
				if !strings.HasSuffix(d.Name, ","+dc.name+")") || d.Algorithm != engine.AuthencName(c) {
					t.Errorf("%v: driver %q (%s), want authenc around %s", c, d.Name, d.Algorithm, dc.name)
				}
				t.Logf("%v: %s", c, d)
				encKey, macKey := rnd(t, c.KeySize()), rnd(t, 32)
				s, err := e.NewFrameSealer(c, encKey, macKey)
				if err != nil {
					t.Fatal(err)
				}
				for i, n := range []int{16, 4096, 16384} {
					seq := uint64(i) << 31
					pt, iv := rnd(t, n), rnd(t, 16)
					want := softFrame(t, c, encKey, macKey, seq, pt, iv)
					got := make([]byte, n+16)
					if err := s.Seal(got, aadOf(seq, n), pt, iv); err != nil || !bytes.Equal(got, want) {
						t.Fatalf("%v %d bytes: %v; equal to software: %v", c, n, err, bytes.Equal(got, want))
					}
					out := make([]byte, n)
					if err := s.Open(out, aadOf(seq, n), want, iv); err != nil || !bytes.Equal(out, pt) {
						t.Fatalf("%v open %d bytes: %v", c, n, err)
					}
					if err := s.Open(out, aadOf(seq, n), flip(want, 0), iv); !errors.Is(err, engine.ErrAuth) {
						t.Fatalf("%v tampered: %v", c, err)
					}
				}
				s.Close()
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0x40
	return b
}

// TestKernelAEADArgs: argument errors are argument errors, and keys of the
// wrong size are refused before the kernel sees them.
func TestKernelAEADArgs(t *testing.T) {
	e := engine.NewAFALGAEAD("", engine.Options{})
	requireAEAD(t, e, cbc256)
	if _, err := e.NewFrameSealer(cbc256, rnd(t, 32), rnd(t, 16)); !errors.Is(err, engine.ErrKeySize) {
		t.Errorf("16-byte MAC key: %v", err)
	}
	if _, err := e.NewFrameSealer(cbc256, rnd(t, 24), rnd(t, 32)); !errors.Is(err, engine.ErrKeySize) {
		t.Errorf("24-byte key for aes-256: %v", err)
	}
	s, err := e.NewFrameSealer(cbc256, rnd(t, 32), rnd(t, 32))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	iv, aad := rnd(t, 16), aadOf(0, 32)
	for name, err := range map[string]error{
		"cbc 17 bytes": s.Seal(make([]byte, 64), aad, make([]byte, 17), iv),
		"short dst":    s.Seal(make([]byte, 32), aad, make([]byte, 32), iv),
		"iv 8":         s.Seal(make([]byte, 64), aad, make([]byte, 32), iv[:8]),
		"too large":    s.Seal(make([]byte, engine.MaxFrameRequest+64), aad, make([]byte, engine.MaxFrameRequest+16), iv),
		"open short":   s.Open(make([]byte, 64), aad, make([]byte, 15), iv),
	} {
		if !engine.IsFrameArgError(err) {
			t.Errorf("%s: %v, want an argument error", name, err)
		}
	}
	s.Close()
	if err := s.Seal(make([]byte, 64), aad, make([]byte, 32), iv); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// alwaysEngine is a record.Policy that sends every frame to one engine.
type alwaysEngine int

func (a alwaysEngine) Pick(int, engine.Direction) int { return int(a) }

// TestKernelAEADRecord runs a link whose one end seals and opens every
// frame on the authenc engine and whose other end is software only: the
// data arrives both ways, every frame was the kernel's, none fell back;
// then a tampered frame is rejected by the kernel as record.ErrAuth.
func TestKernelAEADRecord(t *testing.T) {
	for _, c := range []engine.Cipher{cbc256, {Mode: engine.CTR, KeyBits: 128}} {
		s := suite.Suite{Cipher: c, MAC: suite.HMACSHA256}
		t.Run(s.String(), func(t *testing.T) {
			e := engine.NewAFALGAEAD("", engine.Options{})
			requireAEAD(t, e, c)
			ka, kb := recordKeys(t, c)
			c1, c2 := net.Pipe()
			a, err := record.New(c1, ka, s, record.Options{Engines: []engine.Engine{engine.Software{}, e}, Policy: alwaysEngine(1)})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := record.New(c2, kb, s, record.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			exchange(t, a, b, 300<<10)
			st := a.Stats()
			if st.Frames[engine.Encrypt][1].Load() == 0 || st.Frames[engine.Decrypt][1].Load() == 0 {
				t.Errorf("frames on the aead engine: sealed %d, opened %d", st.Frames[engine.Encrypt][1].Load(), st.Frames[engine.Decrypt][1].Load())
			}
			if n := st.Frames[engine.Encrypt][0].Load() + st.Frames[engine.Decrypt][0].Load(); n != 0 || st.Fallbacks[1].Load() != 0 {
				t.Errorf("%d frames in software, %d fallbacks", n, st.Fallbacks[1].Load())
			}
		})
	}
	t.Run("tampered", func(t *testing.T) {
		c := engine.Cipher{Mode: engine.CTR, KeyBits: 256}
		s := suite.Suite{Cipher: c, MAC: suite.HMACSHA256}
		e := engine.NewAFALGAEAD("", engine.Options{})
		requireAEAD(t, e, c)
		ka, kb := recordKeys(t, c)
		c1, c2 := net.Pipe()
		defer c2.Close()
		a, err := record.New(c1, ka, s, record.Options{Engines: []engine.Engine{engine.Software{}, e}, Policy: alwaysEngine(1)})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		// Frame 0 from b's send keys: CTR's first counter block is S_iv.
		pt := []byte("a frame the kernel must refuse")
		body := softFrame(t, c, kb.Send.Enc, kb.Send.MAC, 0, pt, kb.Send.IV[:])
		wire := append(binary.BigEndian.AppendUint32(nil, uint32(len(pt))), flip(body, 3)...)
		go c2.Write(wire)
		_, err = a.Read(make([]byte, 64))
		if !errors.Is(err, record.ErrAuth) {
			t.Fatalf("read: %v, want record.ErrAuth", err)
		}
		st := a.Stats()
		if st.AuthFailures.Load() != 1 || st.Fallbacks[1].Load() != 0 {
			t.Errorf("auth failures %d, fallbacks %d; want 1, 0 (the kernel checked the tag)", st.AuthFailures.Load(), st.Fallbacks[1].Load())
		}
		if !strings.Contains(err.Error(), engine.AFALGAEADName) {
			t.Errorf("error does not say the engine checked the tag: %v", err)
		}
	})
}

func recordKeys(t testing.TB, c engine.Cipher) (a, b record.Keys) {
	mk := func() record.DirKeys {
		k := record.DirKeys{Enc: rnd(t, c.KeySize()), MAC: rnd(t, record.MACKeySize)}
		copy(k.IV[:], rnd(t, 16))
		return k
	}
	x, y := mk(), mk()
	return record.Keys{Send: x, Recv: y}, record.Keys{Send: y, Recv: x}
}

// exchange sends total random bytes each way at once and checks them.
func exchange(t *testing.T, a, b net.Conn, total int) {
	t.Helper()
	var wg sync.WaitGroup
	one := func(from, to net.Conn) {
		defer wg.Done()
		data := rnd(t, total)
		errc := make(chan error, 1)
		go func() {
			var err error
			for off := 0; off < total && err == nil; off += 7000 {
				_, err = from.Write(data[off:min(off+7000, total)])
			}
			errc <- err
		}()
		got := make([]byte, total)
		_, rerr := io.ReadFull(to, got)
		if werr := <-errc; werr != nil || rerr != nil {
			t.Errorf("write: %v, read: %v", werr, rerr)
			return
		}
		if !bytes.Equal(got, data) {
			t.Error("data differs")
		}
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
}

// BenchmarkKernelAEAD compares a frame sealed on the authenc engine (one
// request) with the skcipher engine plus the record's HMAC in user space
// (what the record does with afalg), and with software only.
func BenchmarkKernelAEAD(b *testing.B) {
	requireAFALG(b)
	c := cbc256
	encKey, macKey := rnd(b, 32), rnd(b, 32)
	e := engine.NewAFALGAEAD("", engine.Options{})
	requireAEAD(b, e, c)
	s, err := e.NewFrameSealer(c, encKey, macKey)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m, err := record.NewMAC(suite.HMACSHA256, macKey)
	if err != nil {
		b.Fatal(err)
	}
	sealers := []engine.FrameSealer{s}
	if v := engine.NewAFALGAEAD("virtio_crypto", engine.Options{}); func() bool { _, err := v.Driver(c); return err == nil }() {
		vs, err := v.NewFrameSealer(c, encKey, macKey)
		if err != nil {
			b.Fatal(err)
		}
		defer vs.Close()
		sealers = append(sealers, vs)
	}
	aad := aadOf(0, 0)
	for _, n := range []int{64, 1024, 4096, 16384, 65536} {
		iv := make([]byte, 16)
		buf := make([]byte, record.HeaderSize+n+engine.FrameTagSize)
		out := make([]byte, len(buf))
		for _, s := range sealers {
			b.Run(fmt.Sprintf("%s/%d", s.Driver().Name, n), func(b *testing.B) {
				b.SetBytes(int64(n))
				b.ReportAllocs()
				binary.BigEndian.PutUint32(aad[8:], uint32(n))
				for i := 0; b.Loop(); i++ {
					binary.BigEndian.PutUint64(aad, uint64(i))
					if err := s.Seal(out[record.HeaderSize:], aad, buf[record.HeaderSize:record.HeaderSize+n], iv); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		for _, ce := range []engine.Engine{engine.NewAFALG("", engine.Options{}), engine.NewAFALG("virtio_crypto", engine.Options{}), engine.Software{}} {
			if _, err := ce.Driver(c); err != nil {
				continue
			}
			cr, err := ce.NewCrypter(c, encKey)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s+hmac/%d", cr.Driver().Name, n), func(b *testing.B) {
				b.SetBytes(int64(n))
				b.ReportAllocs()
				var tag [record.TagSize]byte
				for i := 0; b.Loop(); i++ {
					if err := cr.Encrypt(out[record.HeaderSize:], buf[record.HeaderSize:record.HeaderSize+n], iv); err != nil {
						b.Fatal(err)
					}
					m.Sum(&tag, uint64(i), out[:record.HeaderSize+n])
				}
			})
			cr.Close()
		}
	}
}
