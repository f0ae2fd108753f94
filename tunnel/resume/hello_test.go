package resume

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// TestNegotiateBoth: two ends that resume agree.
func TestNegotiateBoth(t *testing.T) {
	c, s := tcpPair(t) // both write first: a pipe would block
	defer c.Close()
	defer s.Close()
	type res struct {
		ok     bool
		prefix []byte
		err    error
	}
	ch := make(chan res, 1)
	go func() { ok, p, err := Negotiate(s); ch <- res{ok, p, err} }()
	ok, prefix, err := Negotiate(c)
	r := <-ch
	if err != nil || r.err != nil || !ok || !r.ok || prefix != nil || r.prefix != nil {
		t.Fatalf("Negotiate: %v %q %v / %v %q %v", ok, prefix, err, r.ok, r.prefix, r.err)
	}
}

// TestNegotiateOlderPeer: a yamux peer answers the offer as the ping it
// is, or sends a frame of its own first (a stream's SYN): no resumption,
// and its own frame goes to the session.
func TestNegotiateOlderPeer(t *testing.T) {
	syn := []byte{0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0} // window update SYN, stream 1
	for _, tc := range []struct {
		name   string
		first  func(offer []byte) []byte
		prefix []byte
	}{
		{"echo", func(f []byte) []byte { f[3] = 2; return f }, nil},
		{"own frame", func([]byte) []byte { return syn }, syn},
	} {
		c, s := net.Pipe()
		go func() {
			f := make([]byte, 12)
			_, _ = io.ReadFull(s, f)
			_, _ = s.Write(tc.first(f))
		}()
		ok, prefix, err := Negotiate(c)
		if err != nil || ok || !bytes.Equal(prefix, tc.prefix) {
			t.Fatalf("%s: resume %v, prefix %x, %v", tc.name, ok, prefix, err)
		}
		c.Close()
		s.Close()
	}
}

func TestHelloWelcomeRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	h := Hello{Bound: 1 << 20, Received: 12345}
	_, _ = rand.Read(h.Session[:])
	_, _ = rand.Read(h.Proof[:])
	if err := WriteHello(&buf, h); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadHello(&buf); err != nil || got != h {
		t.Fatalf("hello: %+v, %v", got, err)
	}
	w := Welcome{Status: StatusRefused, Bound: 1 << 20, Session: h.Session, Received: 9, Reason: strings.Repeat("r", 300)}
	if err := WriteWelcome(&buf, w); err != nil {
		t.Fatal(err)
	}
	got, err := ReadWelcome(&buf)
	if err != nil || got.Reason != strings.Repeat("r", 255) || got.Received != 9 || got.Session != h.Session {
		t.Fatalf("welcome: %+v, %v", got, err)
	}
	for _, bad := range [][]byte{
		append([]byte{typeWelcome, 3}, make([]byte, 29)...),    // unknown status
		append([]byte{typeHello}, make([]byte, helloLen-1)...), // not a welcome
	} {
		if _, err := ReadWelcome(bytes.NewReader(bad)); !errors.Is(err, ErrProtocol) {
			t.Fatalf("welcome %x: %v", bad[:2], err)
		}
	}
	if _, err := ReadHello(bytes.NewReader(make([]byte, helloLen))); !errors.Is(err, ErrProtocol) {
		t.Fatalf("zero hello: %v", err)
	}
}

// TestProofBindings: a proof holds only for its secret, session and link.
func TestProofBindings(t *testing.T) {
	macs := func() ([]byte, []byte) {
		a, b := make([]byte, 32), make([]byte, 32)
		_, _ = rand.Read(a)
		_, _ = rand.Read(b)
		return a, b
	}
	old1, old2 := macs()
	secret, _, err := Secrets(old1, old2)
	if err != nil {
		t.Fatal(err)
	}
	new1, new2 := macs()
	_, binding, _ := Secrets(new1, new2)
	other1, other2 := macs()
	otherSecret, otherBinding, _ := Secrets(other1, other2)
	var session, otherSession [16]byte
	_, _ = rand.Read(session[:])
	_, _ = rand.Read(otherSession[:])
	p := Proof(secret, session, binding)
	if !CheckProof(secret, session, binding, p) {
		t.Fatal("the proof fails its own check")
	}
	if CheckProof(secret, session, otherBinding, p) {
		t.Fatal("a proof replayed on another link passes")
	}
	if CheckProof(otherSecret, session, binding, p) {
		t.Fatal("a proof under another secret passes")
	}
	if CheckProof(secret, otherSession, binding, p) {
		t.Fatal("a proof for another session passes")
	}
	// Secret and binding are distinct, and differ by direction order.
	s2, b2, _ := Secrets(old2, old1)
	if s2 == secret || b2 == secret {
		t.Fatal("secrets do not depend on the key order")
	}
}
