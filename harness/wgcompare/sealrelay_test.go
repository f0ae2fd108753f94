package wgcompare

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
)

// TestSealedRelay sends more than a pattern period through two sealed
// relays, for each suite the anchor's sealed paths use, with software as
// the engine: the stream arrives intact, and the hop between them carries
// neither the stream's header nor its pattern in the clear.
func TestSealedRelay(t *testing.T) {
	for _, c := range []struct {
		suite string
		full  bool
	}{{"aes-256-cbc-poly1305", false}, {"aes-256-ctr-poly1305", false}, {"aes-256-cbc-poly1305", true}} {
		s := c.suite
		t.Run(fmt.Sprintf("%s full=%v", s, c.full), func(t *testing.T) {
			sink, pattern := setup(t)
			stats := make(chan SealStats, 4)
			report := func(st SealStats, _ error) { stats <- st }
			lb := listen(t)
			go SealedRelay(lb, sink, dialer.DialContext, false, SealOptions{Spec: "software", Suite: s, Full: c.full, Report: report})
			var mu sync.Mutex
			var wire []byte
			mid := mangler(t, lb.Addr().String(), func(off int64, b []byte) []byte {
				mu.Lock()
				if len(wire) < 1<<20 {
					wire = append(wire, b...)
				}
				mu.Unlock()
				return b
			})
			la := listen(t)
			go SealedRelay(la, mid, dialer.DialContext, true, SealOptions{Spec: "software", Suite: s, Full: c.full, Report: report})
			const n = 2*PatternSize + 4097
			res, err := Send(context.Background(), dialer.DialContext, la.Addr().String(), pattern, n)
			if err != nil {
				t.Fatal(err)
			}
			if res.Bytes != n {
				t.Errorf("%+v, want %d bytes", res, n)
			}
			// Four directions: the stream sealed by A and opened by B
			// (its header too), the answer sealed by B and opened by A.
			var streamSealed, streamOpened, answer int
			for range 4 {
				st := <-stats
				switch {
				case st.Bytes == n+HeaderSize && st.Frames >= (n+HeaderSize)/relayBuf:
					// Full frames: the stream in as few as fit.
					if c.full && st.Sealed && st.Frames != (n+HeaderSize+relayBuf-1)/relayBuf {
						t.Errorf("full frames: sealed %v", st)
					}
					if st.Sealed {
						streamSealed++
					} else {
						streamOpened++
					}
				case st.Frames == 1 && st.Bytes < 100:
					answer++
				default:
					t.Errorf("unexpected counts: %v", st)
				}
			}
			if streamSealed != 1 || streamOpened != 1 || answer != 2 {
				t.Errorf("counts: stream sealed %d, opened %d, answers %d", streamSealed, streamOpened, answer)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(wire) < 64<<10 {
				t.Fatalf("the hop carried %d bytes", len(wire))
			}
			if bytes.Contains(wire, []byte(Magic)) || bytes.Contains(wire, Pattern()[:64]) {
				t.Error("the sealed hop carries the stream in the clear")
			}
		})
	}
}

// TestSealedRelayTampered: one flipped bit in the first frame on the
// sealed hop ends the stream at the relay that opens it: the send fails and
// not a byte reaches the far end (opened without its tag, the frame's
// garbled plaintext would).
func TestSealedRelayTampered(t *testing.T) {
	_, pattern := setup(t)
	far := listen(t)
	got := make(chan int64, 1)
	go func() {
		c, err := far.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	lb := listen(t)
	go SealedRelay(lb, far.Addr().String(), dialer.DialContext, false, SealOptions{Spec: "software", Suite: "aes-256-cbc-poly1305"})
	mid := mangler(t, lb.Addr().String(), func(off int64, b []byte) []byte {
		if off == 0 {
			b[7] ^= 0x10 // in frame 0's first ciphertext block
		}
		return b
	})
	la := listen(t)
	go SealedRelay(la, mid, dialer.DialContext, true, SealOptions{Spec: "software", Suite: "aes-256-cbc-poly1305"})
	if _, err := Send(context.Background(), dialer.DialContext, la.Addr().String(), pattern, 1<<20); err == nil {
		t.Error("a tampered stream was sent without an error")
	}
	if n := <-got; n != 0 {
		t.Errorf("%d bytes of a tampered frame reached the far end", n)
	}
}

// TestSealedRelayRefusesBadSetup: an unknown suite or engine fails the
// command before it serves.
func TestSealedRelayRefusesBadSetup(t *testing.T) {
	for _, c := range [][2]string{{"software", "aes-256-cbc-nosuch"}, {"nosuch", "aes-256-cbc-poly1305"}} {
		if err := SealedRelay(listen(t), "127.0.0.1:1", dialer.DialContext, true, SealOptions{Spec: c[0], Suite: c[1]}); err == nil {
			t.Errorf("%v: no error", c)
		}
	}
}
