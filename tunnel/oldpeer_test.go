package tunnel

import (
	"errors"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/stream"
)

// TestOldPeer: a version 1 client gets a reason that names both versions
// back from this server (tunnel/stream's TestOldServerAnswer: this client
// explains the reasonless refusal a version 1 server sends).
func TestOldPeer(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	addr, _, _ := startServer(t, ServerConfig{Options: testOptions(log), Services: map[string]string{"web": "127.0.0.1:1"}})
	opt := testOptions(log)
	_ = opt.setDefaults()
	_, sess := genuineLink(t, addr, opt)
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Write([]byte{1, 3, 'w', 'e', 'b'}); err != nil {
		t.Fatal(err)
	}
	err = stream.ReadResponse(st)
	if !errors.Is(err, stream.ErrBadRequest) || !strings.Contains(err.Error(), "version 1 from the peer, this end speaks 2") {
		t.Errorf("version 1 request: %v", err)
	}
}
