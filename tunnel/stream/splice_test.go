package stream

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/mux"
)

// TestSpliceRefusalBeatsFailedWrite: a server refusing a stream answers,
// closes it, and resets it when the client's first bytes arrive; the
// client's up side then fails its write, possibly before its down side has
// read the answer. The splice's cause must be the refusal with its reason
// (which the client logs and counts as a refusal), never "writing to the
// stream" (a debug-level abort). Here the answer and the reset are both in
// before the splice starts, and pre reads the answer only after up has
// read the local bytes and had time to fail its write: without the wait
// in upWriteFailed, up closes the stream first and the answer is lost.
func TestSpliceRefusalBeatsFailedWrite(t *testing.T) {
	c1, c2 := net.Pipe()
	cs, err := mux.Client(c1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ss, err := mux.Server(c2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	st, err := cs.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	sst, err := ss.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	const reason = "the link carries 4 streams; raise max_streams"
	if _, err := sst.Write(AppendResponse(nil, StatusBusy, reason)); err != nil {
		t.Fatal(err)
	}
	_ = sst.Close()
	// More bytes from the client reach a stream the server closed: the
	// server resets it, and a write here fails once the reset is in.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := st.Write([]byte("x")); errors.Is(err, mux.ErrStreamReset) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the server's reset of the refused stream")
		}
	}

	app, local := tcpPairT(t)
	defer app.Close()
	if _, err := app.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	pre := func() error {
		// up reads the local bytes and writes them at once; give its
		// failed write the head start a busy machine gives it.
		time.Sleep(50 * time.Millisecond)
		return ReadResponse(st)
	}
	_, _, err = Splice(local, st, NewBufPool(), pre)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != StatusBusy || !strings.Contains(err.Error(), reason) {
		t.Fatalf("splice ended with %v, want the refusal (busy: %s)", err, reason)
	}
	_ = app.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, app); err == nil {
		t.Errorf("application: a clean end, want a reset")
	}
}
