package stream

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/mux"
)

// A bulk stream moves to a big buffer and back when it goes quiet; the
// pool never hands out more big buffers than its cap.
func TestCopyBufAdapt(t *testing.T) {
	p := NewBufPool()
	p.maxBig = 2
	a, b, c := p.get(), p.get(), p.get()
	for _, cb := range []*copyBuf{a, b, c} {
		if len(cb.data()) != smallChunk {
			t.Fatalf("a new buffer holds %d bytes, want %d", len(cb.data()), smallChunk)
		}
	}
	a.adapt(smallChunk - 1)
	if len(a.data()) != smallChunk {
		t.Fatal("a chunk short of the small buffer moved to a big one")
	}
	for _, cb := range []*copyBuf{a, b, c} {
		cb.adapt(smallChunk)
	}
	if len(a.data()) != MaxChunk || len(b.data()) != MaxChunk {
		t.Fatalf("bulk streams hold %d and %d bytes, want %d", len(a.data()), len(b.data()), MaxChunk)
	}
	if len(c.data()) != smallChunk || p.bigOut.Load() != 2 {
		t.Fatalf("third bulk stream holds %d bytes with %d big out: the cap of 2 did not hold", len(c.data()), p.bigOut.Load())
	}
	a.adapt(100) // a went quiet: its big buffer is free for c
	if len(a.data()) != smallChunk {
		t.Fatal("a quiet stream kept its big buffer")
	}
	c.adapt(smallChunk)
	if len(c.data()) != MaxChunk {
		t.Fatal("a freed big buffer was not handed to the next bulk stream")
	}
	for _, cb := range []*copyBuf{a, b, c} {
		cb.release()
	}
	if n := p.bigOut.Load(); n != 0 {
		t.Fatalf("%d big buffers out after every stream released its own", n)
	}
}

// Chunks of every size up to MaxChunk cross a splice intact both ways, and
// so they do when the receiving end has no big buffer free (it copies them
// in pieces): end A always has big buffers, end B has them or not.
func TestSpliceChunkSizes(t *testing.T) {
	for _, maxBig := range []int32{maxBigBuffers, 0} {
		c1, c2 := net.Pipe()
		sa, err := mux.Client(c1, nil)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := mux.Server(c2, nil)
		if err != nil {
			t.Fatal(err)
		}
		poolA, poolB := NewBufPool(), NewBufPool()
		poolB.maxBig = maxBig

		stA, err := sa.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		stB, err := sb.AcceptStream()
		if err != nil {
			t.Fatal(err)
		}
		// Each end splices a loopback TCP connection: data written at the
		// A end comes out of the B end and the other way round.
		appA, localA := tcpPairT(t)
		appB, localB := tcpPairT(t)
		var wg sync.WaitGroup
		for _, x := range []struct {
			local net.Conn
			st    *mux.Stream
			pool  *BufPool
		}{{localA, stA, poolA}, {localB, stB, poolB}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, _ = Splice(x.local, x.st, x.pool, nil)
			}()
		}
		var payload []byte
		for _, n := range []int{1, smallChunk - 1, smallChunk, smallChunk + 1, MaxChunk, 3*MaxChunk + 7} {
			payload = append(payload, bytes.Repeat([]byte{byte(n)}, n)...)
		}
		want := sha256.Sum256(payload)
		for _, dir := range [][2]net.Conn{{appA, appB}, {appB, appA}} {
			errc := make(chan error, 1)
			go func() {
				_, err := dir[0].Write(payload)
				errc <- err
			}()
			got := make([]byte, len(payload))
			if _, err := io.ReadFull(dir[1], got); err != nil {
				t.Fatalf("maxBig %d: %v", maxBig, err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(got) != want {
				t.Fatalf("maxBig %d: data changed crossing the splice", maxBig)
			}
		}
		_ = appA.Close()
		_ = appB.Close()
		_ = sa.Close()
		_ = sb.Close()
		wg.Wait()
		if n := poolA.bigOut.Load() + poolB.bigOut.Load(); n != 0 {
			t.Fatalf("maxBig %d: %d big buffers out after both splices ended", maxBig, n)
		}
	}
}

func tcpPairT(t *testing.T) (net.Conn, net.Conn) { return testutil.TCPPair(t) }
