package tunnel

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/record"
)

// proxy is a TCP proxy between client and server. For the n-th connection
// (from 0) it asks tamper for a function that copies server → client;
// nil means a plain copy.
type proxy struct {
	t      *testing.T
	ln     net.Listener
	target string
	tamper func(n int) func(dst io.Writer, src io.Reader) error

	mu    sync.Mutex
	n     int
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, target string, tamper func(n int) func(dst io.Writer, src io.Reader) error) *proxy {
	t.Helper()
	p := &proxy{t: t, ln: testutil.Listen(t), target: target, tamper: tamper}
	p.wg.Add(1)
	go p.run()
	t.Cleanup(func() {
		_ = p.ln.Close()
		p.sever()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// sever resets every connection, as a dead network or host would.
func (p *proxy) sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	resetAll(p.conns)
	p.conns = nil
}

// resetAll resets every connection of conns.
func resetAll(conns []net.Conn) {
	for _, c := range conns {
		netguard.Reset(c)
	}
}

func (p *proxy) run() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		n := p.n
		p.n++
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		down := func(dst io.Writer, src io.Reader) error { _, err := io.Copy(dst, src); return err }
		if p.tamper != nil {
			if f := p.tamper(n); f != nil {
				down = f
			}
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			netguard.Reset(s)
			netguard.Reset(c)
		}()
		go func() {
			defer p.wg.Done()
			_ = down(c, s)
			netguard.Reset(s)
			netguard.Reset(c)
		}()
	}
}

// serverHandshakeLen is the server's handshake answer: one message
// (type:u8 | len:u16be) carrying a Noise message with an ephemeral key
// (32), the sealed max_frame (4) and a tag (16). The frame parser below
// checks it stays in sync.
const serverHandshakeLen = 3 + 32 + 4 + 16

// tamperMode is what a tampering proxy does to frame number at.
type tamperMode int

const (
	tamperFlip tamperMode = iota
	tamperReplay
	tamperReorder
	tamperTruncate
	tamperOversize
)

func (m tamperMode) String() string {
	return [...]string{"flip", "replay", "reorder", "truncate", "oversize"}[m]
}

// frameTamperer copies server → client frame by frame and tampers with
// frame at (counting from 0) in the given way. It reports a frame it can
// not parse to t: that would mean the proxy lost sync and the test proves
// nothing.
func frameTamperer(t *testing.T, mode tamperMode, at int, done chan<- struct{}) func(dst io.Writer, src io.Reader) error {
	return func(dst io.Writer, src io.Reader) error {
		hs := make([]byte, serverHandshakeLen)
		if _, err := io.ReadFull(src, hs); err != nil {
			return err
		}
		if hs[0] != 1 || int(binary.BigEndian.Uint16(hs[1:3])) != serverHandshakeLen-3 {
			t.Errorf("proxy: server handshake message % x is not what the test expects", hs[:3])
		}
		if _, err := dst.Write(hs); err != nil {
			return err
		}
		var held []byte
		for i := 0; ; i++ {
			hdr := make([]byte, 4)
			if _, err := io.ReadFull(src, hdr); err != nil {
				return err
			}
			n := binary.BigEndian.Uint32(hdr)
			if n == 0 || n > record.DefaultMaxFrame {
				t.Errorf("proxy: frame %d has length %d: lost sync", i, n)
				return fmt.Errorf("lost sync")
			}
			frame := make([]byte, 4+int(n)+record.TagSize)
			copy(frame, hdr)
			if _, err := io.ReadFull(src, frame[4:]); err != nil {
				return err
			}
			out := frame
			if i == at {
				close(done)
				switch mode {
				case tamperFlip:
					frame[4+int(n)/2] ^= 0x10
				case tamperReplay:
					out = append(append([]byte{}, frame...), frame...)
				case tamperReorder:
					held = frame
					continue
				case tamperTruncate:
					// Half a frame, then a clean FIN: the client must see
					// the truncation, not a clean end between frames.
					_, _ = dst.Write(frame[:len(frame)/2])
					_ = dst.(*net.TCPConn).CloseWrite()
					time.Sleep(500 * time.Millisecond)
					return nil
				case tamperOversize:
					binary.BigEndian.PutUint32(frame, record.DefaultMaxFrame+16)
				}
			}
			if held != nil && i == at+1 {
				out = append(out, held...)
				held = nil
			}
			if _, err := dst.Write(out); err != nil {
				return err
			}
		}
	}
}
