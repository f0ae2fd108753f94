package tunnel

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/handshake"
)

// linkFrames returns the send_frame field of every "link up" line in logs.
func linkFrames(logs *observer.ObservedLogs) []int64 {
	var got []int64
	for _, e := range logs.FilterMessage("link up").All() {
		if v, ok := e.ContextMap()["send_frame"].(int64); ok {
			got = append(got, v)
		}
	}
	return got
}

// Ends that set different max_frame send frames of the smaller one (the
// handshake tells each the other's): bulk data crosses the link both
// ways. Before version 3 the 256 KiB client's first long frame failed it.
func TestMaxFrameNegotiated(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	slog, slogs := testutil.ObservedLogger(t)
	clog, clogs := testutil.ObservedLogger(t)
	so, co := testOptions(slog), testOptions(clog)
	so.MaxFrame, co.MaxFrame = 64<<10, 256<<10
	saddr, _, _ := startServer(t, ServerConfig{Options: so, Services: map[string]string{"echo": echoT.addr()}})
	addrs, _, _ := startClient(t, ClientConfig{Options: co, Server: saddr}, "echo")
	if err := testutil.EchoRoundTrip(addrs["echo"], 4<<20, 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the server's link up", func() bool { return len(linkFrames(slogs)) == 1 })
	if s, c := linkFrames(slogs), linkFrames(clogs); len(c) != 1 || s[0] != 64<<10 || c[0] != 64<<10 {
		t.Errorf("link up: server send_frame %v, client %v; want 65536 at both", s, c)
	}
}

// oldServerProxy stands for a version 2 server in front of a current one:
// it answers a hello of a newer version with a version 2 alert, as a
// version 2 server does, and passes a version 2 client's connections on.
type oldServerProxy struct {
	ln       net.Listener
	target   string
	mu       sync.Mutex
	versions []byte // the version of every hello, in order
	wg       sync.WaitGroup
}

func (p *oldServerProxy) run(t *testing.T) {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer c.Close()
			hello := make([]byte, 6) // "OFLD" | version | n
			if _, err := io.ReadFull(c, hello); err != nil {
				return
			}
			p.mu.Lock()
			p.versions = append(p.versions, hello[4])
			p.mu.Unlock()
			if hello[4] != 2 {
				// msgAlert, length 2, alertVersion (1), version 2.
				_, _ = c.Write([]byte{2, 0, 2, 1, 2})
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			if _, err := s.Write(hello); err != nil {
				return
			}
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(c, s)
				_ = c.Close()
				close(done)
			}()
			_, _ = io.Copy(s, c)
			_ = s.Close()
			<-done
		}()
	}
}

// A client whose server says it speaks version 2 redials speaking it, at
// once, and says so in its log once. To a version 2 peer each end sends
// frames of at most 64 KiB, so a 256 KiB client and a 64 KiB server (a
// pair version 2 could not serve) carry bulk both ways.
func TestOldServerFallback(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	slog, _ := testutil.ObservedLogger(t)
	clog, clogs := testutil.ObservedLogger(t)
	saddr, _, _ := startServer(t, ServerConfig{Options: testOptions(slog), Services: map[string]string{"echo": echoT.addr()}})
	px := &oldServerProxy{ln: testutil.Listen(t), target: saddr}
	px.wg.Add(1)
	go px.run(t)
	t.Cleanup(func() { px.ln.Close(); px.wg.Wait() })
	opt := testOptions(clog)
	opt.MaxFrame = 256 << 10
	// A long redial wait: the link must come up without one.
	addrs, cli, _ := startClient(t, ClientConfig{Options: opt, Server: px.ln.Addr().String(), RedialMin: time.Hour, RedialMax: time.Hour}, "echo")
	if err := testutil.EchoRoundTrip(addrs["echo"], 4<<20, 2); err != nil {
		t.Fatal(err)
	}
	if c := linkFrames(clogs); len(c) != 1 || c[0] != 64<<10 {
		t.Errorf("link up: client send_frame %v, want 65536 (to a version 2 server)", c)
	}
	px.mu.Lock()
	versions := string(px.versions)
	px.mu.Unlock()
	if want := string([]byte{handshake.Version, 2}); versions != want {
		t.Errorf("hellos of versions %v, want %v", []byte(versions), []byte(want))
	}
	if n := clogs.FilterMessageSnippet("older protocol version").Len(); n != 1 {
		t.Errorf("%d log lines about the older server, want 1", n)
	}
	if n := cli.ctr.handshakes[hsVersion].Load(); n != 1 {
		t.Errorf("%d version failures counted, want 1", n)
	}
}
