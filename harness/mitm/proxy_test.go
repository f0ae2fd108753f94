package main

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// TestProxyParsesTheWire runs a genuine handshake and record frames
// through the proxy: with mode none all the data must arrive and the
// frames be counted, so the proxy's idea of the wire format (copyHandshake,
// readFrame) is the handshake and record packages'; with flip the server
// must refuse the tampered frame.
func TestProxyParsesTheWire(t *testing.T) {
	for _, mode := range []string{"none", "flip"} {
		t.Run(mode, func(t *testing.T) {
			mu.Lock()
			res.Frames = [2]int{}
			mu.Unlock()
			psk, err := config.GenerateKey()
			if err != nil {
				t.Fatal(err)
			}
			cfg := handshake.Config{Suite: suite.Default, PSK: psk, Timeout: 5 * time.Second}
			srvLn, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer srvLn.Close()
			mln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer mln.Close()
			m := &mitm{ln: mln, upstream: srvLn.Addr().String(), mode: mode, at: 0, rng: rand.New(rand.NewPCG(1, 2))}
			go m.run()

			const frames, size = 5, 1000
			got := make(chan error, 1)
			go func() {
				c, err := srvLn.Accept()
				if err != nil {
					got <- err
					return
				}
				defer c.Close()
				keys, err := handshake.Server(context.Background(), c, cfg)
				if err != nil {
					got <- err
					return
				}
				// The deadline goes on before record.New: its reader starts
				// at once and, with flip, may refuse the frame and close c
				// before this goroutine could set anything on it.
				if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
					got <- err
					return
				}
				rc, err := record.New(c, keys, suite.Default, record.Options{})
				if err != nil {
					got <- err
					return
				}
				_, err = io.ReadFull(rc, make([]byte, frames*size))
				got <- err
			}()

			c, err := net.Dial("tcp", mln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			keys, err := handshake.Client(context.Background(), c, cfg)
			if err != nil {
				t.Fatalf("handshake through the proxy: %v", err)
			}
			rc, err := record.New(c, keys, suite.Default, record.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for range frames {
				if _, err := rc.Write(make([]byte, size)); err != nil {
					break // the flipped link may already be cut
				}
				time.Sleep(10 * time.Millisecond)
			}
			err = <-got
			switch {
			case mode == "none" && err != nil:
				t.Fatalf("server read: %v", err)
			case mode == "flip" && !errors.Is(err, record.ErrAuth) && !errors.Is(err, record.ErrFrameTooLarge) && !errors.Is(err, record.ErrBadLength):
				t.Fatalf("server read after a flipped bit: %v, want a record error", err)
			}
			mu.Lock()
			n := res.Frames[0]
			mu.Unlock()
			if mode == "none" && n == 0 {
				// The proxy forwards only whole frames it has parsed, so the
				// data's arrival shows the parse; this shows the counting.
				t.Fatal("proxy counted no frames client to server")
			}
			if mode == "flip" && !m.tampered.Load() {
				t.Fatal("the proxy did not tamper")
			}
		})
	}
}
