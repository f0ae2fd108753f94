package tunnel

import (
	"sort"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/live"
	"github.com/offload-dev/offload/tunnel/record"
)

// An end's Status: its counters and engines, its config's clients (server)
// or its link's state (client), and the live view's links and traffic
// (tunnel/live).

// status is the Status of the end c counts for (its links from the
// live view).
func (c *counters) status(suite string, now time.Time) *live.Status {
	st := &live.Status{Role: c.role, Suite: suite, Engines: append([]string{}, c.engines...), Time: now,
		StreamsActive: max(c.active.Load(), 0), StreamsTotal: map[string]uint64{}}
	for r, name := range streamResultNames {
		st.StreamsTotal[name] = c.streams[r].Load()
	}
	for i, name := range c.engines {
		f := live.EngineFrames{Engine: name,
			FramesSealed: c.stats.Frames[engine.Encrypt][i].Load(), FramesOpened: c.stats.Frames[engine.Decrypt][i].Load(),
			BytesSealed: c.stats.Bytes[engine.Encrypt][i].Load(), BytesOpened: c.stats.Bytes[engine.Decrypt][i].Load(),
			Fallbacks: c.stats.Fallbacks[i].Load()}
		if c.guard != nil {
			f.Out = c.guard.IsOut(i)
		}
		st.Frames = append(st.Frames, f)
	}
	c.live.Fill(st, now)
	return st
}

// Status returns the server's state now: its links, their traffic and
// streams, every client of its config (connected, last seen, never seen;
// their keys' fingerprints), and its counters.
func (s *Server) Status() *live.Status {
	now := time.Now()
	st := s.ctr.status(s.opt.Suite.String(), now)
	state := s.state.Load()
	names := make([]string, 0, len(state.clients))
	for n := range state.clients {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e := state.clients[n]
		cs := live.ClientStatus{Name: n, Keys: append([]string{}, e.fingerprints...)}
		if ctr := s.clientCtr.peek(n); ctr != nil {
			cs.Links = int(max(ctr.links.Load(), 0))
			if t := ctr.lastSeen.Load(); cs.Links > 0 {
				cs.LastSeen = &now
			} else if t != 0 {
				seen := time.Unix(0, t)
				cs.LastSeen = &seen
			}
		}
		st.Clients = append(st.Clients, cs)
	}
	st.Waiting = s.resumes.waitingSessions()
	if e := state.clients[DefaultClient]; len(state.clients) == 1 && e != nil && !state.named {
		st.Key = e.fingerprints[0] // key_file's, no clients:
	}
	return st
}

// Status returns the client's state now: its link (or when it dials
// next, and why the last failed), its key's fingerprint, its traffic,
// its streams by forward, and its counters.
func (c *Client) Status() *live.Status {
	st := c.ctr.status(c.opt.Suite.String(), time.Now())
	st.Server = c.servers.Addr()
	st.Key = handshake.Fingerprint(*c.psk.Load())
	st.ClientStreams = c.ctr.live.Streams.List()
	if cs := c.waiting.Load(); cs != nil {
		if rs := cs.conn.State(); !rs.Attached && cs.conn.Err() == nil {
			st.Waiting = []live.WaitingSession{{Server: cs.server, Since: rs.Since, Streams: cs.sess.NumStreams(), BytesKept: rs.Kept}}
		}
	}
	if len(st.Links) == 0 {
		if dialing, next, _, _ := c.link.State(); dialing {
			st.Dialing = true
		} else {
			st.NextDial = &next
		}
	}
	return st
}

// linkTraffic is the Traffic of a new link of client name: its bytes add
// to the client's and the server's.
func (s *Server) linkTraffic(name string) *record.Traffic {
	return &record.Traffic{Parent: &s.clientCounters(name).traffic}
}

// linkTraffic is the Traffic of the client's next link.
func (c *Client) linkTraffic() *record.Traffic {
	return &record.Traffic{Parent: &c.ctr.live.Total}
}

// forwardKey is the tally kind and name of a client forward's streams:
// forward SERVICE, or socks.
func forwardKey(socks bool, service string) (kind, name string) {
	if socks {
		return "socks", ""
	}
	return "forward", service
}
