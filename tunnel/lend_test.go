package tunnel

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/record"
)

// lender is what the mux needs of its connection to keep a bulk body as
// the opened record frame instead of copying it (tunnel/mux segment.go).
type lender interface {
	ReadLent(most int) ([]byte, record.Lease, error)
}

// Every connection the tunnel runs a mux on lends what it reads: the
// record link itself, an older peer's link behind its prefix, and a
// resumable session. A wrapper that hid ReadLent would put the copy of
// each received bulk byte back without failing anything else.
func TestMuxConnsLend(t *testing.T) {
	for name, c := range map[string]any{
		"record.Conn":              (*record.Conn)(nil),
		"prefixConn":               (*prefixConn)(nil),
		"endingConn (resume.Conn)": endingConn{},
	} {
		if _, ok := c.(lender); !ok {
			t.Errorf("%s does not lend: the mux would copy every bulk byte it receives", name)
		}
	}
}

// prefixConn lends its prefix first, then the link's bytes, in order.
func TestPrefixConnLends(t *testing.T) {
	a, b := net.Pipe()
	s := mustSuite(t, "aes-256-ctr-hmac-sha256")
	dir := func(b byte) record.DirKeys {
		return record.DirKeys{Enc: bytes.Repeat([]byte{b}, s.Cipher.KeySize()), MAC: bytes.Repeat([]byte{b + 1}, record.MACKeySize)}
	}
	ka, kb := record.Keys{Send: dir(1), Recv: dir(3)}, record.Keys{Send: dir(3), Recv: dir(1)}
	ra, err := record.New(a, ka, s, record.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := record.New(b, kb, s, record.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	defer rb.Close()
	go func() { _, _ = ra.Write([]byte(" and the link's bytes")) }()
	_ = rb.SetReadDeadline(time.Now().Add(10 * time.Second)) // a lost prefix fails, not hangs
	p := &prefixConn{Conn: rb, prefix: []byte("the prefix")}
	var got []byte
	for len(got) < len("the prefix and the link's bytes") {
		piece, l, err := p.ReadLent(4)
		if err != nil {
			t.Fatalf("after %q: %v (the prefix lost?)", got, err)
		}
		got = append(got, piece...)
		l.Release()
	}
	if want := "the prefix and the link's bytes"; !bytes.Equal(got, []byte(want)) {
		t.Fatalf("lent %q, want %q", got, want)
	}
}
