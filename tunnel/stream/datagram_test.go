package stream

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestDatagramWire: datagrams of 1 and MaxDatagram bytes cross the framing
// whole and in order; a frame of 0 or more than MaxDatagram bytes is a
// protocol error (ErrBadRequest), and a cut frame is not a datagram.
func TestDatagramWire(t *testing.T) {
	frame := func(d []byte) []byte {
		b := make([]byte, DatagramHeader+len(d))
		PutDatagramHeader(b, len(d))
		copy(b[DatagramHeader:], d)
		return b
	}
	sent := [][]byte{{7}, bytes.Repeat([]byte{9}, MaxDatagram), []byte("last")}
	var wire []byte
	for _, d := range sent {
		wire = append(wire, frame(d)...)
	}
	var got [][]byte
	err := ReadDatagrams(bytes.NewReader(wire), func(d []byte) error {
		got = append(got, bytes.Clone(d))
		return nil
	})
	if !errors.Is(err, io.EOF) || len(got) != len(sent) {
		t.Fatalf("read %d datagrams, ended with %v; want %d and EOF", len(got), err, len(sent))
	}
	for i := range sent {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("datagram %d: %d bytes, want %d", i, len(got[i]), len(sent[i]))
		}
	}

	for name, bad := range map[string][]byte{
		"empty":    {0, 0},
		"oversize": {(MaxDatagram + 1) >> 8, (MaxDatagram + 1) & 0xff},
		"max u16":  {0xff, 0xff},
	} {
		err := ReadDatagrams(bytes.NewReader(append(bad, make([]byte, 1<<16)...)), func([]byte) error {
			t.Fatalf("%s: a datagram passed", name)
			return nil
		})
		if !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s frame: %v, want ErrBadRequest", name, err)
		}
	}
	cut := frame([]byte("hello"))[:4]
	if err := ReadDatagrams(bytes.NewReader(cut), func([]byte) error { t.Fatal("a cut datagram passed"); return nil }); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
}
