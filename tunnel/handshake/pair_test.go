package handshake

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Pair finds the server's key the client holds; a key the server lacks
// fails both ends, each with its own error, and says so for each.
func TestPair(t *testing.T) {
	psks := pskList(t, 3)
	ks, err := NewKeySet(ctr256, psks...)
	if err != nil {
		t.Fatal(err)
	}
	server := Config{Suite: ctr256, Keys: ks}
	if idx, err := Pair(context.Background(), server, Config{Suite: ctr256, PSK: psks[2]}); idx != 2 || err != nil {
		t.Fatalf("a key of the set: %d, %v; want 2, nil", idx, err)
	}
	other := newPSK(t)
	idx, err := Pair(context.Background(), server, Config{Suite: ctr256, PSK: other})
	var pe *PairError
	if idx != -1 || !errors.As(err, &pe) || !errors.Is(pe.Client, ErrAuth) || !errors.Is(pe.Server, ErrAuth) {
		t.Fatalf("a key not in the set: %d, %v; want -1 and both ends' auth errors", idx, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "the client says") || !strings.Contains(msg, "the server says") {
		t.Errorf("error %q does not give both ends", msg)
	}
}
