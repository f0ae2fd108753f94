package record

import (
	"sync/atomic"

	"github.com/offload-dev/offload/engine"
)

// Stats are a link's counters, safe to read at any time (Load) for
// metrics. Frames and Bytes count frames and ciphertext bytes by direction
// (engine.Encrypt, engine.Decrypt) and by the index of the engine that
// produced the result, so a frame another engine failed counts for
// software (index 0). Fallbacks counts, per engine, the frames that engine
// failed and software redid; the selector takes an engine that keeps
// failing out of its profile.
type Stats struct {
	Frames       [2][MaxEngines]atomic.Uint64
	Bytes        [2][MaxEngines]atomic.Uint64
	Fallbacks    [MaxEngines]atomic.Uint64
	AuthFailures atomic.Uint64 // frames whose tag did not verify
	// Rekeys counts the epochs started (rekey.go) by direction: this
	// end's sending keys (engine.Encrypt) and the peer's (engine.Decrypt).
	Rekeys [2]atomic.Uint64
}

func (s *Stats) count(dir engine.Direction, idx, n int) {
	s.Frames[dir][idx].Add(1)
	s.Bytes[dir][idx].Add(uint64(n))
}
