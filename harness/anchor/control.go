package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
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

	once   sync.Once
	closed chan struct{}
	mu     sync.Mutex
	cause  error // why the connection was closed under a request (abort)
}

func newControl(name string, c net.Conn) *control {
	return &control{name: name, c: c, r: bufio.NewReaderSize(c, 1<<20), closed: make(chan struct{})}
}

// requestTimeout bounds one request when nothing else ends it: the
// longest is a shell script that sets up a path on a slow guest.
const requestTimeout = 10 * time.Minute

// dialControl connects to a router's agent, retrying while the guest
// boots; a harness/vm that exits first (vm) ends the wait.
func dialControl(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), addr string, vm *vmProc, wait time.Duration) (*control, error) {
	deadline := time.Now().Add(wait)
	var err error
	for time.Now().Before(deadline) {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var c net.Conn
		c, err = dial(dctx, "tcp", addr)
		cancel()
		if err == nil {
			return newControl(addr, c), nil
		}
		select {
		case <-vm.done:
			return nil, fmt.Errorf("before its agent answered on %s: %w", addr, vm.exitError())
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the agent on %s: %w", addr, context.Cause(ctx))
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("no agent on %s within %v: %w", addr, wait, err)
}

// endOn ends the request waiting on c, with the reason, as soon as ctx
// ends or vm exits: an agent whose guest has powered off never answers,
// and its connection is never closed from its side.
func (c *control) endOn(ctx context.Context, vm *vmProc) {
	go func() {
		select {
		case <-ctx.Done():
			c.abort(context.Cause(ctx))
		case <-vm.done:
			c.abort(vm.exitError())
		case <-c.closed:
		}
	}()
}

// abort closes the connection under a request and records why.
func (c *control) abort(cause error) {
	c.mu.Lock()
	if c.cause == nil {
		c.cause = cause
	}
	c.mu.Unlock()
	c.close()
}

// close closes the connection (once).
func (c *control) close() {
	c.once.Do(func() {
		close(c.closed)
		c.c.Close()
	})
}

// failed wraps a request's I/O error with why the connection was closed
// under it, when it was.
func (c *control) failed(op, what string, err error) error {
	c.mu.Lock()
	cause := c.cause
	c.mu.Unlock()
	if cause != nil {
		return fmt.Errorf("%s: %s: %s: %w (%v)", c.name, op, what, cause, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%s: %s: %s within %v: %w", c.name, op, what, requestTimeout, err)
	}
	return fmt.Errorf("%s: %s: %s: %w", c.name, op, what, err)
}

// do sends one request and reads its answer; an answer that is not ok is
// an error carrying the agent's words (and the answer, for its output).
func (c *control) do(req request) (answer, error) {
	var ans answer
	b, err := json.Marshal(req)
	if err != nil {
		return ans, err
	}
	_ = c.c.SetDeadline(time.Now().Add(requestTimeout))
	if _, err := c.c.Write(append(b, '\n')); err != nil {
		return ans, c.failed(req.Op, "send", err)
	}
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return ans, c.failed(req.Op, "no answer", err)
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
