package tunnel

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestRequestWire(t *testing.T) {
	b, err := appendRequest(nil, "web")
	if err != nil || !bytes.Equal(b, []byte{1, 3, 'w', 'e', 'b'}) {
		t.Fatalf("request % x, %v", b, err)
	}
	if name, err := readRequest(bytes.NewReader(b)); err != nil || name != "web" {
		t.Fatalf("read back %q, %v", name, err)
	}
	for _, bad := range []string{"", strings.Repeat("x", 256)} {
		if _, err := appendRequest(nil, bad); !errors.Is(err, ErrBadRequest) {
			t.Errorf("appendRequest(%d bytes): %v", len(bad), err)
		}
	}
	for name, in := range map[string][]byte{
		"version":   {2, 3, 'w', 'e', 'b'},
		"empty":     {1, 0},
		"truncated": {1, 5, 'w'},
		"nothing":   {},
	} {
		_, err := readRequest(bytes.NewReader(in))
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
		if name == "truncated" && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: %v", name, err)
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
