package mux

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// readFrame reads one frame's header from the raw peer's side and skips
// its body.
func readFrame(t *testing.T, c net.Conn) (typ uint8, flags uint16, id, length uint32) {
	t.Helper()
	var h [HeaderSize]byte
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatal(err)
	}
	typ, flags = h[1], binary.BigEndian.Uint16(h[2:4])
	id, length = binary.BigEndian.Uint32(h[4:8]), binary.BigEndian.Uint32(h[8:12])
	if typ == typeData {
		if _, err := io.CopyN(io.Discard, c, int64(length)); err != nil {
			t.Fatal(err)
		}
	}
	return typ, flags, id, length
}

// pingThrough sends a ping and reads frames until its answer: every frame
// sent before it was handled. It reports whether an RST for stream rst
// came before the answer.
func pingThrough(t *testing.T, c net.Conn, opaque, rst uint32) (sawRST bool) {
	t.Helper()
	if _, err := c.Write(testutil.YamuxHeader(nil, testutil.YamuxPing, testutil.YamuxSYN, 0, opaque)); err != nil {
		t.Fatal(err)
	}
	for {
		typ, flags, id, length := readFrame(t, c)
		if typ == typePing && flags&flagACK != 0 && length == opaque {
			return sawRST
		}
		if flags&flagRST != 0 && id == rst {
			sawRST = true
		}
	}
}

// TestLateFrameAfterReset: a stream this end closed gets data, which it
// answers with a reset (as TCP answers data for a closed socket); the
// peer's FIN, sent before that reset reached it, comes after. That is a
// late frame, logged at debug, not the warning for a frame for a stream
// that never was: harness/outage saw one such warning on each end after a
// resumption, which delivers what both ends sent during the outage at
// once (a probe the application had given up on and closed, answered
// after the outage). A frame for a stream never opened still warns.
func TestLateFrameAfterReset(t *testing.T) {
	a, b := tcpPair(t)
	log, logs := testutil.ObservedLogger(t)
	ours, err := Client(a, &Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer ours.Close()
	st, err := ours.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if typ, flags, id, _ := readFrame(t, b); typ != typeWindowUpdate || flags&flagSYN == 0 || id != st.StreamID() {
		t.Fatalf("first frame: type %d flags %#x stream %d; want stream %d's SYN", typ, flags, id, st.StreamID())
	}
	_ = st.Close()
	if _, flags, _, _ := readFrame(t, b); flags&flagFIN == 0 {
		t.Fatalf("after Close: flags %#x; want a FIN", flags)
	}
	// The peer's answer and its FIN, sent before it saw our FIN.
	var f []byte
	f = testutil.YamuxHeader(f, testutil.YamuxData, testutil.YamuxACK, st.StreamID(), 4)
	f = append(f, "late"...)
	f = testutil.YamuxHeader(f, testutil.YamuxWindowUpdate, testutil.YamuxFIN, st.StreamID(), 0)
	if _, err := b.Write(f); err != nil {
		t.Fatal(err)
	}
	if !pingThrough(t, b, 77, st.StreamID()) {
		t.Fatal("data for a closed stream was not answered with a reset")
	}
	if n := logs.FilterMessage("yamux: frame for missing stream").Len(); n != 0 {
		t.Fatalf("%d warnings for the FIN that crossed this end's reset; want it logged as late", n)
	}
	if n := logs.FilterMessage("yamux: late frame for a stream this end ended").Len(); n != 1 {
		t.Fatalf("%d late-frame lines; want 1", n)
	}

	// Stream 9 was never opened (this end's next is 3): a stray frame.
	if _, err := b.Write(testutil.YamuxHeader(nil, testutil.YamuxWindowUpdate, testutil.YamuxFIN, 9, 0)); err != nil {
		t.Fatal(err)
	}
	pingThrough(t, b, 78, 0)
	if n := logs.FilterMessage("yamux: frame for missing stream").Len(); n != 1 {
		t.Fatalf("%d warnings for a frame for a stream never opened; want 1", n)
	}
}
