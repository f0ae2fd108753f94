package tunnel

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/testutil"
)

// TestRekeyStreamsSurvive: with the keys moving every two frames, a
// long-lived interactive stream (an ssh session, say) and bulk streams
// beside it cross hundreds of rekeys in both directions on one link; no
// stream notices and the link never drops.
func TestRekeyStreamsSurvive(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.rekeyFrames = 2
	opt.MaxFrame = 1024 // more frames, more epochs
	saddr, srv, _ := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"echo": echoT.addr()}})
	addrs, cli, _ := startClient(t, ClientConfig{Options: opt, Server: saddr, RedialMin: 20 * time.Millisecond, RedialMax: 200 * time.Millisecond}, "echo")

	// The interactive stream stays open across the whole test.
	sess, err := net.Dial("tcp", addrs["echo"])
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	keystroke := func(i int) error {
		msg := []byte(fmt.Sprintf("keystroke %d\n", i))
		if _, err := sess.Write(msg); err != nil {
			return err
		}
		got := make([]byte, len(msg))
		_ = sess.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(sess, got); err != nil {
			return err
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("echo %q, sent %q", got, msg)
		}
		return nil
	}
	if err := keystroke(0); err != nil {
		t.Fatal(err)
	}

	const bulk = 6
	var wg sync.WaitGroup
	errs := make(chan error, bulk)
	for i := range bulk {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := testutil.EchoRoundTrip(addrs["echo"], 200<<10, uint64(i)); err != nil {
				errs <- fmt.Errorf("bulk stream %d: %w", i, err)
			}
		}()
	}
	for i := 1; i <= 50; i++ {
		if err := keystroke(i); err != nil {
			t.Fatalf("interactive stream, keystroke %d: %v", i, err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := keystroke(51); err != nil {
		t.Fatalf("interactive stream after the bulk: %v", err)
	}
	for _, st := range []struct {
		name string
		n    [2]uint64
	}{
		{"client", [2]uint64{cli.Stats().Rekeys[engine.Encrypt].Load(), cli.Stats().Rekeys[engine.Decrypt].Load()}},
		{"server", [2]uint64{srv.Stats().Rekeys[engine.Encrypt].Load(), srv.Stats().Rekeys[engine.Decrypt].Load()}},
	} {
		if st.n[0] < 100 || st.n[1] < 100 {
			t.Errorf("%s: %d rekeys sent, %d received; want hundreds", st.name, st.n[0], st.n[1])
		}
	}
	if r, e := cli.ctr.redials.Load(), cli.ctr.linkErrors.Load()+srv.ctr.linkErrors.Load(); r != 0 || e != 0 {
		t.Errorf("%d redials, %d link errors", r, e)
	}
}
