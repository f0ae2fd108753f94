package handshake

import "sync"

// DefaultReplayCache is the number of first messages a ReplayCache made by
// NewReplayCache(0) remembers: 2048 entries of 16 bytes, about 100 KiB with
// the map.
const DefaultReplayCache = 2048

// replayKeyLen is how much of the client's ephemeral key the cache keeps:
// 128 bits make an accidental collision impossible in practice, and only
// first messages that authenticated under the PSK are ever added, so no
// one without the PSK can choose what goes in.
const replayKeyLen = 16

// ReplayCache remembers the ephemeral keys of the last first messages that
// authenticated, so that a recorded first flight replayed to the server is
// refused (ErrReplay) as soon as it is read: no Diffie-Hellman, no reply, no
// slot held while waiting for a key confirmation that can't come. A genuine
// client draws a fresh ephemeral key for every handshake, so it never
// collides. The cache is a fixed ring: when it is full the oldest key is
// forgotten, and a replay of that flight is then refused one step later,
// because the replayer can't send the key confirmation (docs/protocol.md).
// Safe for concurrent use; one per server.
type ReplayCache struct {
	mu   sync.Mutex
	seen map[[replayKeyLen]byte]struct{}
	ring [][replayKeyLen]byte
	next int
	full bool
}

// NewReplayCache returns a cache of n entries (0: DefaultReplayCache).
func NewReplayCache(n int) *ReplayCache {
	if n <= 0 {
		n = DefaultReplayCache
	}
	return &ReplayCache{seen: make(map[[replayKeyLen]byte]struct{}, n), ring: make([][replayKeyLen]byte, n)}
}

// add records the ephemeral key e and reports whether it was new.
func (c *ReplayCache) add(e []byte) (fresh bool) {
	var k [replayKeyLen]byte
	copy(k[:], e)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[k]; ok {
		return false
	}
	if c.full {
		delete(c.seen, c.ring[c.next])
	}
	c.ring[c.next] = k
	c.seen[k] = struct{}{}
	c.next++
	if c.next == len(c.ring) {
		c.next, c.full = 0, true
	}
	return true
}

// Len returns the number of keys remembered.
func (c *ReplayCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}
