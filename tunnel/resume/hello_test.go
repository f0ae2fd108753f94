package resume

import (
	"bytes"
	"crypto/rand"
	"errors"
	"net"
	"strings"
	"testing"
)

// TestOfferAccepted: a server that resumes answers the offer with accept.
func TestOfferAccepted(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	errc := make(chan error, 1)
	go func() { _, err := Sniff(s); errc <- err }()
	ok, prefix, err := Offer(c)
	if err != nil || !ok || prefix != nil {
		t.Fatalf("Offer: %v %q %v", ok, prefix, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestOfferOlderServer: a yamux server echoes the offer as the ping it
// is (after, say, a ping of its own): no resumption, and what it sent
// before the echo goes to the session.
func TestOfferOlderServer(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	own := []byte{0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7} // a keepalive ping of its own
	go func() {
		var f [12]byte
		_, _ = s.Read(f[:])
		_, _ = s.Write(own)
		f[3] = 2 // SYN → ACK, the opaque value echoed
		_, _ = s.Write(f[:])
	}()
	ok, prefix, err := Offer(c)
	if err != nil || ok || !bytes.Equal(prefix, own) {
		t.Fatalf("Offer to an older server: accepted %v, prefix %x, %v", ok, prefix, err)
	}
}

// TestSniffOlderClient: a first frame that is not the offer is handed
// back for the session (a client without resumption).
func TestSniffOlderClient(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	syn := [12]byte{0, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0} // window update SYN, stream 1
	go func() { _, _ = c.Write(syn[:]) }()
	first, err := Sniff(s)
	if !errors.Is(err, ErrNotOffered) || first != syn {
		t.Fatalf("Sniff: %x, %v", first, err)
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
