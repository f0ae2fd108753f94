package metricsserver

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// TestAttackMetricsConnectFlood: a flood of connections that send nothing, as
// fast as they can be made, must not keep a scraper out. Before, each new
// connection at the pending cap reset the oldest pending one, whatever it
// had sent, and more than 64 at once were closed at accept: the scraper's
// connection, its request already in the socket buffer, was one of them
// (11 of 30 scrapes failed against the built binary at ~9,500 conn/s).
// Now a connection whose whole request head has arrived is never the one
// reset, and the cap counts only connections being answered.
func TestAttackMetricsConnectFlood(t *testing.T) {
	testutil.LeakCheck(t)
	ln, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveOn(t, ln, Options{Metrics: page("offload_test_total", 3)})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	flood := 0
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			defer func() { mu.Lock(); flood += n; mu.Unlock() }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					continue
				}
				n++
				time.Sleep(time.Millisecond)
				c.Close()
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	failed := 0
	const scrapes = 40
	for range scrapes {
		code, body, err := scrape(addr, "")
		if err != nil || code != 200 || !strings.Contains(body, "offload_test_total 3\n") {
			failed++
			t.Logf("scrape: %d %v", code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d flood connections; %d of %d scrapes failed", flood, failed, scrapes)
	if failed > 0 {
		t.Errorf("%d of %d scrapes failed during a flood of %d connections", failed, scrapes, flood)
	}
}

// TestAttackMetricsSlotsKeepWholeHeads: at the cap, the connection reset is the
// oldest without a whole request head; one whose head waits in its socket
// buffer, or was read in pieces, stays. (The slots the endpoint used
// before reset the oldest whatever it had sent.)
func TestAttackMetricsSlotsKeepWholeHeads(t *testing.T) {
	testutil.LeakCheck(t)
	const max = 4
	slots := newSlots(max)
	var clients []net.Conn
	var held []*slot
	for range max {
		c, s := testutil.TCPPair(t)
		clients = append(clients, c)
		held = append(held, slots.acquire(s))
	}
	// The oldest sends its whole head; it waits unread in the buffer.
	if _, err := io.WriteString(clients[0], "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The second has read its head in pieces, the end split across reads.
	slots.Record(held[1], []byte("GET /metrics HTTP/1.1\r\n"))
	slots.Record(held[1], []byte("\r"))
	slots.Record(held[1], []byte("\n"))
	// The third has sent half a head.
	if _, err := io.WriteString(clients[2], "GET /metrics HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the bytes reach the server's socket
	_, s := testutil.TCPPair(t)
	ns := slots.acquire(s)
	if ns == nil {
		t.Fatal("no slot for a new connection")
	}
	if !held[2].Evicted || held[0].Evicted || held[1].Evicted || held[3].Evicted {
		t.Errorf("evicted: %v %v %v %v, want only the third (half a head)", held[0].Evicted, held[1].Evicted, held[2].Evicted, held[3].Evicted)
	}
	if slots.len() != max {
		t.Errorf("%d pending, want %d", slots.len(), max)
	}
	// When every slot holds a whole head, a new connection is refused.
	for _, sl := range append(held, ns) {
		slots.Record(sl, []byte("\n\n"))
	}
	_, s2 := testutil.TCPPair(t)
	if slots.acquire(s2) != nil {
		t.Error("a slot was taken from a connection with its whole head")
	}
}
