package handshake

import (
	"context"
	"net"
	"strings"
)

// Pair runs a client's handshake (client) against a server's (server)
// over an in-memory pipe, without the network: offload validate's pair
// check of two configs. Each end names a suite or key mismatch as it
// would on the wire. It returns the index of the server's key the client
// holds, or a *PairError with both ends' errors.
func Pair(ctx context.Context, server, client Config) (int, error) {
	cc, sc := net.Pipe()
	defer cc.Close()
	defer sc.Close()
	type result struct {
		idx int
		err error
	}
	done := make(chan result, 1)
	go func() {
		k, idx, err := ServerKey(ctx, sc, server)
		k.Wipe()
		if err != nil {
			_ = sc.Close() // as a server closes a failed handshake's connection
		}
		done <- result{idx, err}
	}()
	k, cerr := Client(ctx, cc, client)
	k.Wipe()
	if cerr != nil {
		_ = cc.Close() // as a client closes a failed handshake's connection
	}
	r := <-done
	if cerr == nil && r.err == nil {
		return r.idx, nil
	}
	return -1, &PairError{Client: cerr, Server: r.err}
}

// PairError is a failed pair handshake: each end's error as it logs it
// (nil for an end that completed).
type PairError struct{ Client, Server error }

func (e *PairError) Error() string {
	msg := "the handshake fails"
	for _, end := range []struct {
		name string
		err  error
	}{{"client", e.Client}, {"server", e.Server}} {
		if end.err != nil {
			msg += "; the " + end.name + " says: " + strings.TrimPrefix(end.err.Error(), "handshake failed: ")
		}
	}
	return msg
}

func (e *PairError) Unwrap() []error { return []error{e.Client, e.Server} }
