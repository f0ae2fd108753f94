package tunnel

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/testutil"
)

func TestRequestWire(t *testing.T) {
	b, err := appendRequest(nil, kindService, "web")
	if err != nil || !bytes.Equal(b, []byte{2, kindService, 0, 3, 'w', 'e', 'b'}) {
		t.Fatalf("request % x, %v", b, err)
	}
	if req, err := readRequest(bytes.NewReader(b)); err != nil || req != (request{kindService, "web"}) {
		t.Fatalf("read back %+v, %v", req, err)
	}
	for _, good := range []request{
		{kindSocks, socksArg("example.com", 443)},
		{kindSocks, socksArg("::1", 8080)},
		{kindUDP, "dns"},
		{kindReverseListen, "[::1]:9000"},
		{kindReverseConnect, "127.0.0.1:9000"},
	} {
		b, err := appendRequest(nil, good.kind, good.arg)
		if err != nil {
			t.Fatalf("%+v: %v", good, err)
		}
		if req, err := readRequest(bytes.NewReader(b)); err != nil || req != good {
			t.Errorf("%+v: read back %+v, %v", good, req, err)
		}
	}
	if host, port := parseSocksArg(socksArg("::1", 8080)); host != "::1" || port != 8080 {
		t.Errorf("socks arg: %q %d", host, port)
	}
	for _, bad := range []request{
		{kindService, ""}, {kindService, strings.Repeat("x", 256)},
		{kindSocks, "\x00\x01"}, {kindSocks, socksArg(strings.Repeat("x", 256), 1)},
		{kindReverseListen, "localhost:9000"}, {kindReverseListen, ":9000"},
		{9, "x"},
	} {
		if _, err := appendRequest(nil, bad.kind, bad.arg); !errors.Is(err, ErrBadRequest) {
			t.Errorf("appendRequest(%d, %d bytes): %v", bad.kind, len(bad.arg), err)
		}
	}
	for name, in := range map[string][]byte{
		"version 1":  {1, 3, 'w', 'e', 'b'},
		"version 3":  {3, kindService, 0, 3, 'w', 'e', 'b'},
		"empty":      {2, kindService, 0, 0},
		"oversize":   {2, kindService, 0xff, 0xff},
		"kind":       {2, 0, 0, 1, 'x'},
		"truncated":  {2, kindService, 0, 5, 'w'},
		"short head": {2, kindService, 0},
		"nothing":    {},
	} {
		_, err := readRequest(bytes.NewReader(in))
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
		if strings.HasPrefix(name, "truncated") && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: %v", name, err)
		}
		if strings.HasPrefix(name, "version") && (!errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "this end speaks 2")) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestOldPeer: a version 1 client gets a reason that names both versions
// back from this server; this client explains the reasonless refusal a
// version 1 server sends.
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
	err = readResponse(st)
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "version 1 from the peer, this end speaks 2") {
		t.Errorf("version 1 request: %v", err)
	}
	old := &StatusError{Status: statusBadRequest}
	if !errors.Is(old, ErrBadRequest) || !strings.Contains(old.Error(), "before stream protocol 2") {
		t.Errorf("version 1 server's answer reads %q", old)
	}
}

// TestStatusErrorSaysReasonOnce: a server's reason that is its own error,
// already naming the status, is not prefixed with the status again.
func TestStatusErrorSaysReasonOnce(t *testing.T) {
	for _, c := range []struct {
		e    StatusError
		want string
	}{
		{StatusError{Status: statusBusy, Msg: "too many streams: the link carries 4 streams; raise max_streams"}, "too many streams: the link carries 4 streams; raise max_streams"},
		{StatusError{Status: statusBusy, Msg: "the link carries 4 streams"}, "too many streams: the link carries 4 streams"},
		{StatusError{Status: statusBusy, Msg: "too many streamsX"}, "too many streams: too many streamsX"},
		{StatusError{Status: statusBusy}, "too many streams"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
}

func TestResponseWire(t *testing.T) {
	if err := readResponse(bytes.NewReader(appendResponse(nil, statusOK, ""))); err != nil {
		t.Fatal(err)
	}
	for status, want := range map[byte]error{
		statusUnknownService: ErrUnknownService,
		statusDialFailed:     ErrDialFailed,
		statusBusy:           ErrBusy,
		statusBadRequest:     ErrBadRequest,
		statusDenied:         ErrDenied,
		statusConnRefused:    ErrDialFailed,
		statusHostUnreach:    ErrDialFailed,
		statusNetUnreach:     ErrDialFailed,
		statusDialTimeout:    ErrDialFailed,
		99:                   ErrBadRequest,
	} {
		err := readResponse(bytes.NewReader(appendResponse(nil, status, strings.Repeat("m", 300))))
		var se *StatusError
		if !errors.Is(err, want) || !errors.As(err, &se) || len(se.Msg) != 255 {
			t.Errorf("status %d: %v", status, err)
		}
	}
	if err := readResponse(bytes.NewReader([]byte{0, 5, 'x'})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated: %v", err)
	}
}
