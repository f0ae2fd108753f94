package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/offload-dev/offload/harness/internal/routerctl"
)

// ip is iproute2's in the guests (harness/vm -deb iproute2): busybox's has
// no xfrm.
const ip = "/usr/sbin/ip"

type (
	request = routerctl.Request
	answer  = routerctl.Answer
)

// control is the host's connection to one router's agent.
type control struct {
	name string
	c    net.Conn
	r    *bufio.Reader
}

// dialControl connects to a router's agent, retrying while the guest
// boots; a harness/vm that exits first (done) ends the wait.
func dialControl(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), addr string, done <-chan error, wait time.Duration) (*control, error) {
	deadline := time.Now().Add(wait)
	var err error
	for time.Now().Before(deadline) {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var c net.Conn
		c, err = dial(dctx, "tcp", addr)
		cancel()
		if err == nil {
			return &control{name: addr, c: c, r: bufio.NewReaderSize(c, 1<<20)}, nil
		}
		select {
		case verr := <-done:
			return nil, fmt.Errorf("harness/vm exited before its agent answered on %s: %v (its output above says why)", addr, verr)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("no agent on %s within %v: %w", addr, wait, err)
}

// do sends one request and reads its answer; an answer that is not ok is
// an error carrying the agent's words (and the answer, for its output).
func (c *control) do(req request) (answer, error) {
	var ans answer
	b, err := json.Marshal(req)
	if err != nil {
		return ans, err
	}
	_ = c.c.SetDeadline(time.Now().Add(10 * time.Minute))
	if _, err := c.c.Write(append(b, '\n')); err != nil {
		return ans, fmt.Errorf("%s: %s: %w", c.name, req.Op, err)
	}
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return ans, fmt.Errorf("%s: %s: no answer: %w", c.name, req.Op, err)
	}
	if err := json.Unmarshal(line, &ans); err != nil {
		return ans, fmt.Errorf("%s: %s: %w", c.name, req.Op, err)
	}
	if !ans.OK {
		return ans, fmt.Errorf("%s: %s: %s\n%s", c.name, req.Op, ans.Err, ans.Out)
	}
	return ans, nil
}

// sh runs a shell script in the guest and gives its output.
func (c *control) sh(script string) (string, error) {
	ans, err := c.do(request{Op: "sh", Cmd: script})
	if err != nil {
		return "", err
	}
	return ans.Out, nil
}
