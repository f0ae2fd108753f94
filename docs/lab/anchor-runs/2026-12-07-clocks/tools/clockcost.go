//go:build ignore

// clockcost measures, on the machine it runs on, the CPU time one clock
// read costs a Go program (time.Since: the runtime's monotonic clock;
// time.Now: the wall clock and the monotonic one), and pumps bytes through
// a loopback forward for counting a tunnel's system calls:
//
//	GOOS=linux GOARCH=mipsle GOMIPS=softfloat go build -o clockcost clockcost.go
//	clockcost cost [-n 200000]
//	clockcost handoff [-n 200000]                  # goroutine hand-offs, on one P and between locked threads
//	clockcost sink -listen 127.0.0.1:7411 &        # the target: reads and discards
//	clockcost send -to 127.0.0.1:7413 -mib 16      # the load: MiB of zeros, then waits for the close
//
// On linux/mipsle Go's runtime has no vDSO clock (runtime/vdso_linux.go
// is not built for mips or mipsle; sys_linux_mipsx.s calls
// SYS_clock_gettime), so each read is a system call there.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: clockcost cost|sink|send [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	n := fs.Int("n", 200000, "clock reads per measurement")
	listen := fs.String("listen", "127.0.0.1:7411", "sink: address to listen on")
	to := fs.String("to", "127.0.0.1:7413", "send: address to send to")
	mib := fs.Int("mib", 16, "send: MiB to send")
	_ = fs.Parse(os.Args[2:])
	switch os.Args[1] {
	case "cost":
		start := time.Now()
		var sink time.Duration
		c0 := cpu()
		for range *n {
			sink += time.Since(start)
		}
		c1 := cpu()
		var w int64
		for range *n {
			w += time.Now().UnixNano()
		}
		c2 := cpu()
		for i := range *n {
			sink += time.Duration(i) // the loop alone
		}
		c3 := cpu()
		loop := float64(c3-c2) / float64(*n)
		fmt.Printf("per call, CPU time: time.Since %.2f µs, time.Now %.2f µs (loop alone %.3f µs; %d calls each; %d %d)\n",
			(float64(c1-c0)/float64(*n)-loop)/1e3, (float64(c2-c1)/float64(*n)-loop)/1e3, loop/1e3, *n, sink%2, w%2)
	case "handoff":
		// A round trip over two unbuffered channels is two hand-offs: on
		// one P each is a scheduling round (park, ready, run); with both
		// goroutines locked to their threads each also wakes a thread
		// (futex) and switches to it.
		// A pending timer makes every scheduling round read the clock
		// (the runtime's timers check), as the tunnel's keepalive and
		// stall-watch timers do.
		for _, m := range []struct {
			name          string
			timer, locked bool
		}{{"one P, no timer", false, false}, {"one P, a timer pending", true, false}, {"threads locked, a timer pending", true, true}} {
			var t *time.Timer
			if m.timer {
				t = time.AfterFunc(time.Hour, func() {})
			}
			ping, pong := make(chan int), make(chan int)
			go func() {
				if m.locked {
					runtime.LockOSThread()
				}
				for v := range ping {
					pong <- v
				}
				close(pong)
			}()
			if m.locked {
				runtime.LockOSThread()
			}
			c0 := cpu()
			for i := range *n {
				ping <- i
				<-pong
			}
			c1 := cpu()
			close(ping)
			<-pong
			if m.locked {
				runtime.UnlockOSThread()
			}
			if t != nil {
				t.Stop()
			}
			fmt.Printf("per hand-off, CPU time: %.2f µs (%s; GOMAXPROCS %d; %d round trips)\n",
				float64(c1-c0)/float64(2**n)/1e3, m.name, runtime.GOMAXPROCS(0), *n)
		}
	case "sink":
		l, err := net.Listen("tcp", *listen)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	case "send":
		c, err := net.Dial("tcp", *to)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		buf := make([]byte, 64<<10)
		t0 := time.Now()
		for range *mib * 16 {
			if _, err := c.Write(buf); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, c)
		fmt.Printf("sent %d MiB in %v\n", *mib, time.Since(t0).Round(time.Millisecond))
	}
}
