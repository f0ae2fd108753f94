package main

import (
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestVirtioPICLines(t *testing.T) {
	interrupts := `           CPU0
  0:          2    XT-PIC   0  timer
  4:        151    XT-PIC   4  ttyS0
 10:          0    XT-PIC  10  virtio0, virtio1
 11:        403    XT-PIC  11  virtio2
 23:        327      MIPS   7  timer
 24:          5      MIPS   8  virtio9
`
	if got := virtioPICLines(interrupts); !reflect.DeepEqual(got, []int{10, 11}) {
		t.Errorf("virtioPICLines = %v, want [10 11]", got)
	}
	if got := virtioPICLines("  0: 2 XT-PIC 0 timer\n"); got != nil {
		t.Errorf("no virtio line: %v", got)
	}
}

// After quit the agent half-closes and waits for the host to close, so
// the answer is out of the guest before it powers off; a host that never
// closes costs the wait's bound, not a hang.
func TestLingerClose(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pair := func() (agent, host net.Conn) {
		host, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		agent, err = l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return agent, host
	}

	agent, host := pair()
	if _, err := agent.Write([]byte("{\"ok\":true}\n")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- lingerClose(agent, time.Hour) }()
	got, err := io.ReadAll(host) // the answer, then the agent's half-close
	if err != nil || string(got) != "{\"ok\":true}\n" {
		t.Fatalf("the host read %q, %v", got, err)
	}
	select {
	case err := <-done:
		t.Fatalf("lingerClose returned (%v) before the host closed", err)
	default:
	}
	host.Close()
	if err := <-done; err != nil {
		t.Errorf("lingerClose after the host closed: %v", err)
	}

	agent, host = pair()
	defer host.Close()
	if err := lingerClose(agent, 10*time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not close within 10ms") {
		t.Errorf("lingerClose with a host that never closes: %v, want its bound named", err)
	}
}
