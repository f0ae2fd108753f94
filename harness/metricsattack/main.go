// Command metricsattack attacks an offload /metrics endpoint from outside
// while a genuine scraper scrapes it, and reports whether every scrape
// succeeded and the server's resident memory (docs/defences.md,
// "The metrics endpoint"). Start a server with metrics: 127.0.0.1:9100, then
//
//	go run ./harness/metricsattack -a 127.0.0.1:9100 -pid $(pidof offload) -m flood -n 64
//	go run ./harness/metricsattack -m idle -n 10000     # idle, half, slow, noread, flood, flood1
//
// Modes: idle holds n connections that send nothing; half sends half a
// request head on each; slow sends a head one byte a second; noread sends
// a whole request and never reads (receive buffer of 1 byte); flood has n
// goroutines connect and close after 1 ms as fast as they can; flood1 is
// flood sending one byte first. The scraper GETs /metrics every 200 ms
// with -t as bearer token and a 3 s timeout, from the second second on.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("a", "127.0.0.1:9100", "metrics address")
	mode := flag.String("m", "flood", "idle|half|slow|noread|flood|flood1")
	n := flag.Int("n", 64, "connections (idle, half, slow, noread) or goroutines (flood)")
	dur := flag.Duration("d", 10*time.Second, "attack duration")
	token := flag.String("t", "", "the scraper's bearer token")
	pid := flag.Int("pid", 0, "server process to report VmRSS of")
	flag.Parse()
	end := time.Now().Add(*dur)
	done := make(chan string)
	go func() { done <- attack(*addr, *mode, *n, end) }()
	time.Sleep(time.Second)
	ok, fail, worst := 0, 0, time.Duration(0)
	var peak string
	for time.Now().Add(time.Second).Before(end) {
		t0 := time.Now()
		if err := scrape(*addr, *token); err != nil {
			fail++
			fmt.Fprintln(os.Stderr, "scrape:", err)
		} else {
			ok++
		}
		worst = max(worst, time.Since(t0))
		if r := rss(*pid); r > peak {
			peak = r
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("%s; scrapes ok %d failed %d, slowest %v", <-done, ok, fail, worst.Round(time.Millisecond))
	if *pid != 0 {
		fmt.Printf("; server VmRSS peak %s", peak)
	}
	fmt.Println()
	if fail > 0 {
		os.Exit(1)
	}
}

func scrape(addr, token string) error {
	req, err := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || !strings.Contains(string(b), "offload_") {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// rss is the VmRSS line of /proc/pid/status, zero-padded for comparing.
func rss(pid int) string {
	if pid == 0 {
		return ""
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			return fmt.Sprintf("%8s kB", f[1])
		}
	}
	return ""
}

func attack(addr, mode string, n int, end time.Time) string {
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 2*time.Second) }
	if mode == "flood" || mode == "flood1" {
		var conns, errs atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					c, err := dial()
					if err != nil {
						errs.Add(1)
						continue
					}
					conns.Add(1)
					if mode == "flood1" {
						_, _ = c.Write([]byte("G"))
					}
					time.Sleep(time.Millisecond)
					c.Close()
				}
			}()
		}
		wg.Wait()
		return fmt.Sprintf("%s: %d connections, %d dial errors", mode, conns.Load(), errs.Load())
	}
	var conns []net.Conn
	for range n {
		c, err := dial()
		if err != nil {
			continue
		}
		conns = append(conns, c)
		switch mode {
		case "half":
			_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n")
		case "noread":
			if sc, ok := c.(syscall.Conn); ok {
				if raw, err := sc.SyscallConn(); err == nil {
					_ = raw.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1) })
				}
			}
			_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
		case "slow":
			go func() {
				for _, b := range []byte("GET /metrics HTTP/1.1\r\nX-A: " + strings.Repeat("a", 100)) {
					if _, err := c.Write([]byte{b}); err != nil || time.Now().After(end) {
						return
					}
					time.Sleep(time.Second)
				}
			}()
		}
	}
	opened := len(conns)
	time.Sleep(time.Until(end))
	open := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && os.IsTimeout(err) {
			open++ // still open, nothing to read
		}
		c.Close()
	}
	return fmt.Sprintf("%s: %d connections opened, %d still open at the end", mode, opened, open)
}
