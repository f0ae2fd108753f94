package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/offload-dev/offload/measure/bench"
)

// iperf3 as the load generator (-load iperf3), a second one beside
// measure/bench's: every tool carries iperf3's client to an iperf3 server
// instead of the harness's load to its sink, so the figures come from a
// generator the project did not write (issue 28). iperf3 checks no data,
// so this mode leaves out the verified sink and the memory run, which
// needs it. MB/s and CPU s/GB are per byte sent (TCP delivered them all:
// iperf3's receiver stops counting when the test ends, a few hundred KiB
// short on a short run), over the longer of the sender's and the
// receiver's seconds.

const (
	loadBench = "bench"
	loadIperf = "iperf3"
)

// startIperfSink starts an iperf3 server on a free loopback port.
func startIperfSink(ctx context.Context) (*proc, string, error) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		return nil, "", fmt.Errorf("%w (apt-get install iperf3)", err)
	}
	addr, err := freePort()
	if err != nil {
		return nil, "", err
	}
	p, err := startProc("iperf3 -s", "iperf3", "-s", "-B", "127.0.0.1", "-p", port(addr))
	if err != nil {
		return nil, "", err
	}
	if err := waitListen(ctx, addr, p); err != nil {
		stop(p)
		return nil, "", fmt.Errorf("iperf3 -s: %w", err)
	}
	return p, addr, nil
}

// iperfResult is what one iperf3 client run reports.
type iperfResult struct {
	sent    int64
	seconds float64
	client  bench.CPUTime // the client process's
}

func (r iperfResult) MBps() float64 { return float64(r.sent) / r.seconds / 1e6 }

// iperfRun sends bytes over streams connections to addr with iperf3. The
// server takes one test at a time and may still be closing the last one
// (its far end draining through a slow tool): a client it turns away as
// busy tries again, for up to a minute.
func iperfRun(ctx context.Context, addr string, streams int, bytes int64) (iperfResult, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		cmd := exec.CommandContext(ctx, "iperf3", "-c", "127.0.0.1", "-p", port(addr), "-n", strconv.FormatInt(bytes, 10),
			"-P", strconv.Itoa(streams), "-J")
		out, err := cmd.Output()
		res, perr := parseIperf(out)
		switch {
		case perr == nil:
			if ps := cmd.ProcessState; ps != nil {
				res.client = bench.CPUTime{User: ps.UserTime(), System: ps.SystemTime()}
			}
			return res, nil
		case strings.Contains(perr.Error(), "server is busy") && time.Now().Before(deadline) && ctx.Err() == nil:
			time.Sleep(250 * time.Millisecond)
		default:
			return res, errors.Join(perr, err)
		}
	}
}

// parseIperf reads iperf3 -J's summary; iperf3 reports its own failures in
// an "error" field of the same JSON.
func parseIperf(b []byte) (iperfResult, error) {
	var j struct {
		Error string `json:"error"`
		End   struct {
			SumSent struct {
				Bytes   int64   `json:"bytes"`
				Seconds float64 `json:"seconds"`
			} `json:"sum_sent"`
			SumReceived struct {
				Bytes   int64   `json:"bytes"`
				Seconds float64 `json:"seconds"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return iperfResult{}, fmt.Errorf("iperf3 -J: %w", err)
	}
	if j.Error != "" {
		return iperfResult{}, fmt.Errorf("iperf3: %s", j.Error)
	}
	r := iperfResult{sent: j.End.SumSent.Bytes, seconds: max(j.End.SumSent.Seconds, j.End.SumReceived.Seconds)}
	if r.sent <= 0 || r.seconds <= 0 {
		return r, fmt.Errorf("iperf3: no transfer in its summary (sent %d bytes in %.3fs)", r.sent, r.seconds)
	}
	return r, nil
}

// iperfReady waits until a short iperf3 run crosses the tool (it may still
// be starting), for up to 20 s: firstByte's counterpart.
func iperfReady(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		_, err := iperfRun(ctx, addr, 1, 16<<10)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("no iperf3 run through it within 20s: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
