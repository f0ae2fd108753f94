package netguard

import "net"

// SlotWatch is what a slot owner (the handshake slots, the metrics
// endpoint's) learns from a SlotConn about the first message of one of
// its connections, S: a first flight, a request head. The owner holds its
// own lock in each.
type SlotWatch[S any] interface {
	// Pending reports whether sl's first message has not all been seen;
	// only then does a read wait and Settle first.
	Pending(sl S) bool
	// Settle is called once bytes wait in sl's socket buffer, before the
	// read takes them: the owner looks at them (Peek).
	Settle(sl S)
	// Record tells the owner what a read took from sl's connection.
	Record(sl S, p []byte)
}

// SlotConn is a connection holding slot Slot of Watch while its first
// message arrives. Its reads wait for bytes and let the owner look at them
// before taking them: were they taken first and recorded after, the
// message would for a moment be in neither what was recorded nor the
// socket buffer, look incomplete, and could be evicted (a genuine client
// beside a flood, 1 in 20 under -race beside a busy core).
type SlotConn[S any] struct {
	net.Conn
	Watch SlotWatch[S]
	Slot  S
}

func (c SlotConn[S]) Read(p []byte) (int, error) {
	if c.Watch.Pending(c.Slot) {
		if ok, err := WaitData(c.Conn); err == nil && ok {
			c.Watch.Settle(c.Slot)
		}
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.Watch.Record(c.Slot, p[:n])
	}
	return n, err
}
