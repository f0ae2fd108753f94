package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Wire format the proxy parses (docs/protocol.md, tunnel/handshake/wire.go,
// tunnel/record): the client's hello, "OFLD" | version | n | suite[n],
// then handshake messages, type | len:u16 | body[len]: two from the client
// (Noise message 1, key confirmation), one from the server (Noise message
// 2); then record frames, len:u32 | ciphertext[len] | tag[16], where the
// top bit of len (epochFlag) marks the first frame of a new epoch.
const (
	helloFixed = 6
	msgHeader  = 3
	tagSize    = 16
	epochFlag  = 1 << 31
)

// copyHandshake forwards one direction's handshake from r to dst: the
// hello and two messages client to server (dir 0), one message server to
// client (dir 1).
func copyHandshake(r *bufio.Reader, dst io.Writer, dir int) error {
	if dir == 0 {
		var h [helloFixed]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return fmt.Errorf("hello: %w", err)
		}
		s := make([]byte, h[helloFixed-1])
		if _, err := io.ReadFull(r, s); err != nil {
			return fmt.Errorf("hello: %w", err)
		}
		if _, err := dst.Write(append(h[:], s...)); err != nil {
			return err
		}
		if err := copyMsg(r, dst); err != nil {
			return err
		}
	}
	return copyMsg(r, dst)
}

// copyMsg forwards one handshake message.
func copyMsg(r *bufio.Reader, dst io.Writer) error {
	var h [msgHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return fmt.Errorf("handshake message: %w", err)
	}
	b := make([]byte, msgHeader+int(binary.BigEndian.Uint16(h[1:])))
	copy(b, h[:])
	if _, err := io.ReadFull(r, b[msgHeader:]); err != nil {
		return fmt.Errorf("handshake message: %w", err)
	}
	_, err := dst.Write(b)
	return err
}

// readFrame reads one whole record frame and returns it with its length
// header (epochFlag included).
func readFrame(r *bufio.Reader) (f []byte, hw uint32, err error) {
	var hb [4]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return nil, 0, err
	}
	hw = binary.BigEndian.Uint32(hb[:])
	f = make([]byte, 4+int(hw&^epochFlag)+tagSize)
	copy(f, hb[:])
	if _, err := io.ReadFull(r, f[4:]); err != nil {
		return nil, 0, err
	}
	return f, hw, nil
}

// mitm is the proxy between the client and the server. It tampers once,
// on the first link, in direction dir, at data frame at (or, for
// oldepoch, two frames after the first rekey).
type mitm struct {
	ln       net.Listener
	upstream string
	mode     string
	dir      int // 0: client to server, 1: server to client
	at       int
	rng      *rand.Rand
	tampered atomic.Bool
	conns    atomic.Int32
	mu       sync.Mutex // rng, and one tamper at a time
}

func (m *mitm) run() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", m.upstream)
		if err != nil {
			c.Close()
			continue
		}
		first := m.conns.Add(1) == 1 // tamper on the first link only
		go m.pipe(c, s, 0, first)
		go m.pipe(s, c, 1, first)
	}
}

// pipe forwards src to dst, one direction of a link, tampering if this is
// the direction and link to tamper with. Any error ends the link: both
// connections are closed, as a cut would.
func (m *mitm) pipe(src, dst net.Conn, dir int, first bool) {
	defer dst.Close()
	defer src.Close()
	r := bufio.NewReaderSize(src, 1<<20)
	if copyHandshake(r, dst, dir) != nil {
		return
	}
	write := func(fs ...[]byte) bool {
		for _, f := range fs {
			if _, err := dst.Write(f); err != nil {
				return false
			}
		}
		return true
	}
	active := first && dir == m.dir && m.mode != "none"
	var history [][]byte // this direction's frames as forwarded, for replay
	var held []byte      // reorder: the frame held back
	sawEpochAt := -1
	for i := 0; ; i++ {
		f, hw, err := readFrame(r)
		if err != nil {
			if held != nil {
				write(held)
			}
			return
		}
		mu.Lock()
		res.Frames[dir]++
		if hw&epochFlag != 0 {
			res.Epochs[dir]++
		}
		mu.Unlock()
		if first && hw&epochFlag != 0 && sawEpochAt < 0 {
			sawEpochAt = i
		}
		if held != nil {
			// The tampering is done once f goes out: the receiver may cut
			// the link at f, before held is written.
			m.tampered.Store(true)
			if !write(f, held) {
				return
			}
			held = nil
			continue
		}
		trigger := active && !m.tampered.Load() && i >= m.at
		if active && m.mode == "oldepoch" {
			trigger = !m.tampered.Load() && sawEpochAt >= 0 && i >= sawEpochAt+2 && len(history) > 0
		}
		if !trigger {
			if !write(f) {
				return
			}
			if len(history) < 4096 {
				history = append(history, f)
			}
			continue
		}
		if !m.tamper(r, dst, f, history, sawEpochAt, &held) {
			return
		}
		history = append(history, f)
	}
}

// tamper does the one tampering with frame f and says whether to go on
// forwarding. The tampering counts as done before its bytes are written:
// the receiver may cut the link at the first bad frame, and a write after
// that fails.
func (m *mitm) tamper(r *bufio.Reader, dst net.Conn, f []byte, history [][]byte, sawEpochAt int, held *[]byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	rng := m.rng
	write := func(fs ...[]byte) bool {
		for _, f := range fs {
			if _, err := dst.Write(f); err != nil {
				return false
			}
		}
		return true
	}
	switch m.mode {
	case "reorder":
		*held = f // written after the next frame, which counts as the tampering (pipe)
		return true
	case "replay":
		if len(history) == 0 {
			return write(f) // nothing to replay yet; try the next frame
		}
	}
	m.tampered.Store(true)
	switch m.mode {
	case "flip":
		bit := rng.IntN(len(f)*8 - 1) // never the top bit of the header here
		if bit == 0 {
			bit = 1
		}
		f[bit/8] ^= 1 << (7 - bit%8)
		return write(f)
	case "flipflag":
		f[0] ^= 0x80
		return write(f)
	case "replay":
		return write(history[rng.IntN(len(history))], f)
	case "dup":
		return write(f, f)
	case "drop":
		return true
	case "truncate":
		cut := 1 + rng.IntN(len(f)-1)
		write(f[:cut]) // the link ends here either way
		time.Sleep(50 * time.Millisecond)
		return false
	case "cutclean":
		return false
	case "blackhole":
		// Keep the connection, forward nothing more this way.
		_, _ = io.Copy(io.Discard, r) // until the ends give up on the link
		return false
	case "halfcut":
		// FIN at a frame boundary in this direction only; the other
		// direction keeps flowing.
		if err := dst.(*net.TCPConn).CloseWrite(); err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, r)
		time.Sleep(30 * time.Second)
		return false
	case "oldepoch":
		// The last frame of the epoch before the switch, then this one.
		old := history[len(history)-1]
		if sawEpochAt >= 1 && sawEpochAt-1 < len(history) {
			old = history[sawEpochAt-1]
		}
		return write(old, f)
	}
	return write(f)
}
