// Command flood attacks the unauthenticated surface of a running offload
// server as an outsider would (docs/lab/attacks.md, "Outsiders against the built
// server"), optionally beside a genuine client's handshakes, and prints
// connections per second and the genuine success rate. Modes: idle (send
// nothing), half (half a hello), hello (a hello, no Noise message),
// garbage (a flight of random bytes), wrongpsk (a well-formed flight with
// a random ephemeral and tag), replay (a recorded flight, -flight),
// slowloris (a hello one byte per -slow), mitm (a proxy that records the
// first flight it forwards), none (only the probe). -sources spreads the
// flood over 127.1.x.y; -src6 over /64s of a prefix routed to lo
// (ip -6 route add local 2001:db8::/48 dev lo); -pp sends a PROXY v2
// header first. For tests on your own machine only.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"log"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/suite"
)

var (
	addr       = flag.String("addr", "127.0.0.1:17000", "server")
	mode       = flag.String("mode", "idle", "idle|half|garbage|wrongpsk|replay|slowloris|hello|mitm|none")
	workers    = flag.Int("workers", 8, "attack workers")
	rate       = flag.Float64("rate", 0, "connections per second in all (0: as fast as workers go)")
	hold       = flag.Duration("hold", 0, "keep each attack connection open this long after sending (0: close at once after reading what comes)")
	dur        = flag.Duration("dur", 10*time.Second, "attack duration")
	sources    = flag.Int("sources", 1, "distinct IPv4 sources 127.1.x.y (1: default source)")
	src6       = flag.String("src6", "", "IPv6 base prefix with a local route, e.g. 2001:db8::/48; sources are /64s in it")
	same64     = flag.Bool("same64", false, "with -src6: every source in one /64 (different addresses)")
	flightF    = flag.String("flight", "/tmp/rta/flight.bin", "replay: recorded first flight")
	keyF       = flag.String("key", "", "probe: key file of a genuine client")
	probeEv    = flag.Duration("probe", 0, "genuine handshake probe every this (0: none)")
	probeTO    = flag.Duration("probe-timeout", 5*time.Second, "genuine probe's handshake timeout")
	probeSrc   = flag.String("probe-src", "127.0.0.2", "probe's source address")
	slowEv     = flag.Duration("slow", time.Second, "slowloris: one byte every this")
	listen     = flag.String("listen", "127.0.0.1:17001", "mitm: listen here, forward to -addr")
	ppHdr      = flag.String("pp", "", "send a PROXY v2 header first naming this source (ip) ; 'rand' random 10.x; 'rand6' random /64")
	ppSlow     = flag.Bool("pp-slow", false, "send the PROXY header one byte per -slow")
	ppHuge     = flag.Bool("pp-huge", false, "PROXY header with 2 KiB of TLVs")
	probePP    = flag.String("probe-pp", "", "probe: send a PROXY v2 header naming this source first")
	probeDelay = flag.Duration("probe-delay", 0, "probe: wait this long after connect before the first write (a slow client router)")
	suiteN     = flag.String("suite", "aes-256-ctr-hmac-sha256", "")
)

var st struct {
	dials, dialErr, sent, alerts, resets, eofs, other atomic.Int64
	open                                              atomic.Int64
}

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if *mode == "mitm" {
		mitm()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	var wg sync.WaitGroup
	var probeRes []probeResult
	var pmu sync.Mutex
	if *probeEv > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probeRes = probeLoop(ctx, &pmu)
		}()
	}
	var tick <-chan time.Time
	if *rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / *rate))
		defer t.Stop()
		tick = t.C
	}
	flight := mkFlight()
	if *mode != "none" {
		for i := 0; i < *workers; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				for ctx.Err() == nil {
					if tick != nil {
						select {
						case <-tick:
						case <-ctx.Done():
							return
						}
					}
					attack(ctx, flight)
				}
			}(i)
		}
	}
	start := time.Now()
	go func() {
		var last int64
		for ctx.Err() == nil {
			time.Sleep(time.Second)
			d := st.dials.Load()
			fmt.Fprintf(os.Stderr, "%5.1fs dials %d (+%d/s) dialErr %d open %d alerts %d resets %d eofs %d other %d\n",
				time.Since(start).Seconds(), d, d-last, st.dialErr.Load(), st.open.Load(), st.alerts.Load(), st.resets.Load(), st.eofs.Load(), st.other.Load())
			last = d
		}
	}()
	wg.Wait()
	el := time.Since(start).Seconds()
	fmt.Printf("attack %s: %d conns in %.1fs = %.0f conn/s, dialErr %d, alerts %d, resets %d, eofs %d\n", *mode, st.dials.Load(), el, float64(st.dials.Load())/el,
		st.dialErr.Load(), st.alerts.Load(), st.resets.Load(), st.eofs.Load())
	if *probeEv > 0 {
		ok, n := 0, len(probeRes)
		var worst, sum time.Duration
		reasons := map[string]int{}
		for _, r := range probeRes {
			if r.err == nil {
				ok++
				sum += r.took
				worst = max(worst, r.took)
			} else {
				reasons[short(r.err)]++
			}
		}
		avg := time.Duration(0)
		if ok > 0 {
			avg = sum / time.Duration(ok)
		}
		fmt.Printf("genuine probes: %d/%d ok (%.0f%%), avg %v, worst %v; failures %v\n", ok, n, 100*float64(ok)/float64(max(n, 1)), avg.Round(time.Millisecond), worst.Round(time.Millisecond), reasons)
	}
}

func short(err error) string {
	s := err.Error()
	for _, k := range []string{"reset", "timed out", "refused", "EOF", "busy", "authentication"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

var srcCounter atomic.Uint64

func srcAddr() net.Addr {
	n := srcCounter.Add(1)
	if *src6 != "" {
		p := netip.MustParsePrefix(*src6)
		a := p.Addr().As16()
		if *same64 {
			// vary the interface id
			for i := 8; i < 16; i++ {
				a[i] = byte(mrand.Uint32())
			}
		} else {
			k := n % uint64(max(*sources, 1))
			// bits 48..63: the /64 within the /48
			a[6], a[7] = byte(k>>8), byte(k)
			a[15] = 1
		}
		return &net.TCPAddr{IP: a[:]}
	}
	if *sources <= 1 {
		return nil
	}
	k := n % uint64(*sources)
	return &net.TCPAddr{IP: net.IPv4(127, 1, byte(k>>8), byte(k))}
}

func mkFlight() []byte {
	s, err := suite.Parse(*suiteN)
	if err != nil {
		log.Fatal(err)
	}
	prefix, n := handshake.FlightHeader(s)
	switch *mode {
	case "garbage":
		b := make([]byte, n)
		rand.Read(b)
		return b
	case "half":
		return prefix[:len(prefix)/2]
	case "hello":
		return prefix
	case "wrongpsk":
		return nil // fresh each time
	case "replay":
		b, err := os.ReadFile(*flightF)
		if err != nil {
			log.Fatal(err)
		}
		return b
	}
	return nil
}

func wrongPSKFlight() []byte {
	// A valid-looking flight: right header, random ephemeral + tag. The
	// server cannot tell it from a wrong-PSK client without the trial.
	s, _ := suite.Parse(*suiteN)
	prefix, n := handshake.FlightHeader(s)
	b := make([]byte, n)
	copy(b, prefix)
	rand.Read(b[len(prefix):])
	return b
}

func ppHeader() []byte {
	if *ppHdr == "" {
		return nil
	}
	var src netip.Addr
	switch *ppHdr {
	case "rand":
		src = netip.AddrFrom4([4]byte{10, byte(mrand.UintN(256)), byte(mrand.UintN(256)), byte(mrand.UintN(256))})
	case "rand6":
		var a [16]byte
		a[0], a[1] = 0x20, 0x01
		for i := 2; i < 16; i++ {
			a[i] = byte(mrand.Uint32())
		}
		src = netip.AddrFrom16(a)
	default:
		src = netip.MustParseAddr(*ppHdr)
	}
	h := []byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, 0x21}
	var body []byte
	if src.Is4() {
		h = append(h, 0x11)
		s4, d4 := src.As4(), [4]byte{127, 0, 0, 1}
		body = append(body, s4[:]...)
		body = append(body, d4[:]...)
	} else {
		h = append(h, 0x21)
		s16, d16 := src.As16(), netip.IPv6Loopback().As16()
		body = append(body, s16[:]...)
		body = append(body, d16[:]...)
	}
	body = append(body, 0x30, 0x39, 0x1b, 0x58)
	if *ppHuge {
		for len(body) < 2000 {
			body = append(body, 0xE0, 0x01, 0xF0)
			body = append(body, make([]byte, 0x1F0)...)
		}
	}
	h = append(h, byte(len(body)>>8), byte(len(body)))
	return append(h, body...)
}

func attack(ctx context.Context, flight []byte) {
	d := net.Dialer{LocalAddr: srcAddr(), Timeout: 3 * time.Second, Control: freebind}
	c, err := d.DialContext(ctx, "tcp", *addr)
	st.dials.Add(1)
	if err != nil {
		st.dialErr.Add(1)
		return
	}
	st.open.Add(1)
	defer st.open.Add(-1)
	defer c.Close()
	if h := ppHeader(); h != nil {
		if *ppSlow {
			if !slowWrite(ctx, c, h) {
				return
			}
		} else {
			c.Write(h)
		}
	}
	switch *mode {
	case "wrongpsk":
		flight = wrongPSKFlight()
	case "slowloris":
		s, _ := suite.Parse(*suiteN)
		prefix, _ := handshake.FlightHeader(s)
		if !slowWrite(ctx, c, prefix) {
			return
		}
		return
	}
	if len(flight) > 0 {
		if _, err := c.Write(flight); err != nil {
			classify(err)
			return
		}
		st.sent.Add(1)
	}
	if *hold > 0 {
		c.SetReadDeadline(time.Now().Add(*hold))
	} else if len(flight) == 0 {
		return
	} else {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
	}
	var buf [512]byte
	for {
		n, err := c.Read(buf[:])
		if n > 0 && buf[0] == 2 {
			st.alerts.Add(1)
		}
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return
			}
			classify(err)
			return
		}
	}
}

// slowWrite writes p a byte at a time, one every -slow; it reports
// false when a write failed (classified) or ctx ended.
func slowWrite(ctx context.Context, c net.Conn, p []byte) bool {
	for _, b := range p {
		if _, err := c.Write([]byte{b}); err != nil {
			classify(err)
			return false
		}
		select {
		case <-time.After(*slowEv):
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func classify(err error) {
	switch {
	case err == io.EOF:
		st.eofs.Add(1)
	case strings.Contains(err.Error(), "reset"):
		st.resets.Add(1)
	default:
		st.other.Add(1)
	}
}

type probeResult struct {
	at   time.Time
	took time.Duration
	err  error
}

func loadKey() []byte {
	b, err := os.ReadFile(*keyF)
	if err != nil {
		log.Fatal(err)
	}
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != 32 {
		log.Fatalf("key: %v %d", err, len(k))
	}
	return k
}

func probeLoop(ctx context.Context, mu *sync.Mutex) []probeResult {
	psk := loadKey()
	s, _ := suite.Parse(*suiteN)
	var res []probeResult
	t := time.NewTicker(*probeEv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return res
		case <-t.C:
		}
		start := time.Now()
		err := probe(psk, s)
		r := probeResult{at: start, took: time.Since(start), err: err}
		if err != nil {
			fmt.Fprintf(os.Stderr, "probe failed after %v: %v\n", r.took.Round(time.Millisecond), err)
		}
		res = append(res, r)
	}
}

// probe: one genuine handshake, and the server must keep the link (read
// until the server's first record frame would arrive or 300ms pass).
func probe(psk []byte, s suite.Suite) error {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(*probeSrc)}, Timeout: *probeTO, Control: freebind}
	c, err := d.Dial("tcp", *addr)
	if err != nil {
		return err
	}
	if *probePP != "" {
		save := *ppHdr
		*ppHdr = *probePP
		h := ppHeader()
		*ppHdr = save
		c.Write(h)
	}
	if *probeDelay > 0 {
		c = &delayConn{Conn: c}
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *probeTO)
	defer cancel()
	keys, err := handshake.Client(ctx, c, handshake.Config{Suite: s, PSK: psk, Timeout: *probeTO})
	if err != nil {
		return err
	}
	keys.Wipe()
	// The server has not yet checked our confirmation; a failed one makes
	// it close. Give it a moment and check it did not.
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var b [1]byte
	_, err = c.Read(b[:])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil
	}
	if err == nil {
		return nil
	}
	return fmt.Errorf("after handshake: %w", err)
}

// mitm forwards -listen to -addr and saves each connection's first
// client write as the recorded flight.
func mitm() {
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	saved := false
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			u, err := net.Dial("tcp", *addr)
			if err != nil {
				c.Close()
				return
			}
			var buf [4096]byte
			n, err := c.Read(buf[:])
			if err != nil {
				c.Close()
				u.Close()
				return
			}
			if !saved {
				saved = true
				os.WriteFile(*flightF, buf[:n], 0o600)
				log.Printf("recorded first flight: %d bytes from %v", n, c.RemoteAddr())
			}
			u.Write(buf[:n])
			go func() { io.Copy(u, c); u.Close() }()
			io.Copy(c, u)
			c.Close()
		}()
	}
}

type delayConn struct {
	net.Conn
	once sync.Once
}

func (c *delayConn) Write(p []byte) (int, error) {
	c.once.Do(func() { time.Sleep(*probeDelay) })
	return c.Conn.Write(p)
}
