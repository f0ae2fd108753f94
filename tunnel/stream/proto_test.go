package stream

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestRequestWire(t *testing.T) {
	b, err := AppendRequest(nil, KindService, "web")
	if err != nil || !bytes.Equal(b, []byte{2, KindService, 0, 3, 'w', 'e', 'b'}) {
		t.Fatalf("request % x, %v", b, err)
	}
	if req, err := ReadRequest(bytes.NewReader(b)); err != nil || req != (Request{KindService, "web"}) {
		t.Fatalf("read back %+v, %v", req, err)
	}
	for _, good := range []Request{
		{KindSocks, SocksArg("example.com", 443)},
		{KindSocks, SocksArg("::1", 8080)},
		{KindUDP, "dns"},
		{KindReverseListen, "[::1]:9000"},
		{KindReverseConnect, "127.0.0.1:9000"},
	} {
		b, err := AppendRequest(nil, good.Kind, good.Arg)
		if err != nil {
			t.Fatalf("%+v: %v", good, err)
		}
		if req, err := ReadRequest(bytes.NewReader(b)); err != nil || req != good {
			t.Errorf("%+v: read back %+v, %v", good, req, err)
		}
	}
	if host, port := ParseSocksArg(SocksArg("::1", 8080)); host != "::1" || port != 8080 {
		t.Errorf("socks arg: %q %d", host, port)
	}
	for _, bad := range []Request{
		{KindService, ""}, {KindService, strings.Repeat("x", 256)},
		{KindSocks, "\x00\x01"}, {KindSocks, SocksArg(strings.Repeat("x", 256), 1)},
		{KindReverseListen, "localhost:9000"}, {KindReverseListen, ":9000"},
		{9, "x"},
	} {
		if _, err := AppendRequest(nil, bad.Kind, bad.Arg); !errors.Is(err, ErrBadRequest) {
			t.Errorf("AppendRequest(%d, %d bytes): %v", bad.Kind, len(bad.Arg), err)
		}
	}
	for name, in := range map[string][]byte{
		"version 1":  {1, 3, 'w', 'e', 'b'},
		"version 3":  {3, KindService, 0, 3, 'w', 'e', 'b'},
		"empty":      {2, KindService, 0, 0},
		"oversize":   {2, KindService, 0xff, 0xff},
		"kind":       {2, 0, 0, 1, 'x'},
		"truncated":  {2, KindService, 0, 5, 'w'},
		"short head": {2, KindService, 0},
		"nothing":    {},
	} {
		_, err := ReadRequest(bytes.NewReader(in))
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

// TestOldServerAnswer: this client explains the reasonless refusal a
// version 1 server sends (tunnel's TestOldPeer has this server answer a
// version 1 client).
func TestOldServerAnswer(t *testing.T) {
	old := &StatusError{Status: StatusBadRequest}
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
		{StatusError{Status: StatusBusy, Msg: "too many streams: the link carries 4 streams; raise max_streams"}, "too many streams: the link carries 4 streams; raise max_streams"},
		{StatusError{Status: StatusBusy, Msg: "the link carries 4 streams"}, "too many streams: the link carries 4 streams"},
		{StatusError{Status: StatusBusy, Msg: "too many streamsX"}, "too many streams: too many streamsX"},
		{StatusError{Status: StatusBusy}, "too many streams"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
}

func TestResponseWire(t *testing.T) {
	if err := ReadResponse(bytes.NewReader(AppendResponse(nil, StatusOK, ""))); err != nil {
		t.Fatal(err)
	}
	for status, want := range map[byte]error{
		StatusUnknownService: ErrUnknownService,
		StatusDialFailed:     ErrDialFailed,
		StatusBusy:           ErrBusy,
		StatusBadRequest:     ErrBadRequest,
		StatusDenied:         ErrDenied,
		StatusConnRefused:    ErrDialFailed,
		StatusHostUnreach:    ErrDialFailed,
		StatusNetUnreach:     ErrDialFailed,
		StatusDialTimeout:    ErrDialFailed,
		99:                   ErrBadRequest,
	} {
		err := ReadResponse(bytes.NewReader(AppendResponse(nil, status, strings.Repeat("m", 300))))
		var se *StatusError
		if !errors.Is(err, want) || !errors.As(err, &se) || len(se.Msg) != 255 {
			t.Errorf("status %d: %v", status, err)
		}
	}
	if err := ReadResponse(bytes.NewReader([]byte{0, 5, 'x'})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated: %v", err)
	}
}
