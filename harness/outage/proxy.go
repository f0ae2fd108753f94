package main

// The path of -proxy, the rig without root: a TCP proxy on loopback
// between offload's client and its server that stands for the WAN. An
// outage resets both sides of every connection it carries (SO_LINGER 0,
// as a dead modem or a NAT that forgot the mapping does) and refuses new
// ones until the path is back; a cut resets them and refuses nothing.

import (
	"io"
	"net"
	"slices"
	"sync"
)

type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool       // refusing: accepted connections are reset at once
	conns  []net.Conn // both sides of each connection it carries
}

// newProxy listens on a free loopback port and carries each connection
// to target.
func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target}
	go p.run()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) close() { _ = p.ln.Close(); p.cut() }

// setDown takes the path away (every connection reset, new ones refused)
// or brings it back.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.cut()
	}
}

// cut resets every connection the proxy carries and says how many
// (each counted once, not per side).
func (p *proxy) cut() int {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		reset(c)
	}
	return len(conns) / 2
}

func reset(c net.Conn) {
	if t, ok := c.(*net.TCPConn); ok {
		_ = t.SetLinger(0)
	}
	_ = c.Close()
}

func (p *proxy) run() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.carry(c)
	}
}

// carry relays c to the target, half-closes passed on, until either side
// ends or a cut resets both.
func (p *proxy) carry(c net.Conn) {
	var s net.Conn
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if !down {
		var err error
		if s, err = net.Dial("tcp", p.target); err != nil {
			reset(c)
			return
		}
		// Registered under the lock that setDown takes: a connection
		// dialled while the path went down is reset here, not carried.
		p.mu.Lock()
		if down = p.down; !down {
			p.conns = append(p.conns, c, s)
		}
		p.mu.Unlock()
	}
	if down {
		reset(c)
		if s != nil {
			reset(s)
		}
		return
	}
	done := make(chan struct{})
	go func() { pipe(s, c); close(done) }()
	pipe(c, s)
	<-done
	_ = c.Close()
	_ = s.Close()
	p.mu.Lock()
	p.conns = slices.DeleteFunc(p.conns, func(x net.Conn) bool { return x == c || x == s })
	p.mu.Unlock()
}

// pipe copies src to dst and passes src's end on as a half-close.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
