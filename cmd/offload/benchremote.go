package main

// bench -server: when the server refuses the bench stream, the load sees
// only a reset. The tunnel client logs the server's answer; the recorder
// below keeps it, so that bench can say which service is missing and how
// to add it instead of printing the reset.

import (
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap/zapcore"

	"github.com/offload-dev/offload/tunnel/stream"
)

// refusalRecorder is a zap core that keeps the last *stream.StatusError
// logged (the client logs each refused stream with its error).
type refusalRecorder struct {
	mu  sync.Mutex
	err error
}

func (r *refusalRecorder) Enabled(zapcore.Level) bool        { return true }
func (r *refusalRecorder) With([]zapcore.Field) zapcore.Core { return r }
func (r *refusalRecorder) Sync() error                       { return nil }

func (r *refusalRecorder) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, r)
}

func (r *refusalRecorder) Write(_ zapcore.Entry, fields []zapcore.Field) error {
	for _, f := range fields {
		err, ok := f.Interface.(error)
		var se *stream.StatusError
		if f.Type == zapcore.ErrorType && ok && errors.As(err, &se) {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
		}
	}
	return nil
}

// lastOrNil is the last refusal; nil on a nil recorder (in-process).
func (r *refusalRecorder) lastOrNil() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// remoteRefusal explains the server's refusal of the bench service:
// what is missing on the server, and how to add it.
func remoteRefusal(server, service string, refusal error) error {
	switch {
	case errors.Is(refusal, stream.ErrUnknownService):
		return fmt.Errorf("server %s has no service %q (%w): on the server run a sink, offload bench -sink 127.0.0.1:9999, "+
			"add \"%s: 127.0.0.1:9999\" under services: in its config, and reload it (kill -HUP); or name another sink with -service",
			server, service, refusal, service)
	case errors.Is(refusal, stream.ErrDenied):
		return fmt.Errorf("server %s does not let this key use service %q (%w): add %s to the services of its entry under clients: and reload it (kill -HUP)",
			server, service, refusal, service)
	}
	return fmt.Errorf("server %s refused service %q: %w", server, service, refusal)
}
