// Package live is the live view of one end of the tunnel: its links, their
// traffic and rates, the streams open by kind and name, and the Status
// `offload status` prints and /status serves. The tunnel feeds it (a link
// up or down, a stream opened, the record layer's byte counters); it
// knows no Server or Client.
package live

import (
	"fmt"
	"io"
	"math"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
)

// The live view: what `offload status` prints and /status serves
// (tunnel/metricsserver, through cmd), and the byte counters of /metrics that move while a
// transfer runs.
//
//	record.Conn Write/Read ──atomic add──> link's record.Traffic ──Parent──> client's (server) ──Parent──> end's
//	                                             │                                                          │
//	                        sampler (every RateTick): ring of rateSamples per link and for the end ─────────┘
//	Status / metrics / status log line: counters now against the oldest sample: bytes/s over ≤ rateWindow
//
// Bytes are the links' plaintext (what the stream multiplexer sends and
// receives, its headers included), counted by the record layer per Write
// and Read, so they move during a transfer, not when a stream ends. A
// link's streams are counted by kind and name (a service, "socks", a UDP
// service, a reverse listen address; on the client its forwards) as they
// start and end, under a mutex per stream, never per byte.
//
// Cardinality: per client name (the config's), per link only while it is
// up, which max_links caps (the client shows its current link: one it
// retired after a GoAway or a key change still finishes its streams, and
// their bytes count in the end's total, but it is not listed).

const (
	// RateTick is how often the end samples its counters (Sample); a
	// rate is over the last rateSamples samples, at most rateWindow.
	RateTick    = 2 * time.Second
	rateSamples = 5
	rateWindow  = RateTick * rateSamples
)

// Status is one end's state at Time: what `offload status` prints, and
// what /status serves as JSON.
type Status struct {
	Role string `json:"role"` // "server" or "client"
	// Version, Policy (the engine spec: software, auto, hybrid, ...) and
	// Listen (the server's tunnel address) are the caller's
	// (cmd/offload), which knows them; the tunnel leaves them empty.
	Version string    `json:"version,omitempty"`
	Policy  string    `json:"policy,omitempty"`
	Listen  string    `json:"listen,omitempty"`
	Suite   string    `json:"suite"`
	Engines []string  `json:"engines"`
	Time    time.Time `json:"time"`
	// Started is when Serve or Run began (zero before).
	Started time.Time `json:"started"`
	// Key is the fingerprint (handshake.Fingerprint) of the end's
	// pre-shared key: the client's, or a server's key_file; a server
	// with clients lists theirs in Clients.
	Key string `json:"key,omitempty"`

	// Client only: the server the link goes to (or the next dial does),
	// and the last handshake tried, with its error if it failed. While
	// the link is down, NextDial is when the next dial starts, or
	// Dialing says one is under way.
	Server        string     `json:"server,omitempty"`
	LastAttempt   *time.Time `json:"last_attempt,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	NextDial      *time.Time `json:"next_dial,omitempty"`
	Dialing       bool       `json:"dialing,omitempty"`
	ClientStreams []Streams  `json:"client_streams,omitempty"`

	// Clients (server only) are every client the server accepts, by
	// name, whether or not it is connected.
	Clients []ClientStatus `json:"clients,omitempty"`

	// Links are the links up now, oldest first.
	Links []LinkStatus `json:"links"`
	// Waiting (with resume_window) are the sessions whose link died,
	// kept for their clients to resume: the server's, or the client's own.
	Waiting []WaitingSession `json:"waiting_sessions,omitempty"`

	// Traffic of every link since the start, and its rate now.
	Traffic

	StreamsActive int64             `json:"streams_active"`
	StreamsTotal  map[string]uint64 `json:"streams_total"` // by result: ok, aborted, refused
	// Frames are the record layer's counters by engine (record.Stats).
	Frames []EngineFrames `json:"frames"`
}

// Traffic is bytes each way and their rate (bytes a second over the last
// rateWindow, or since the link came up if that is less).
type Traffic struct {
	BytesSent     uint64  `json:"bytes_sent"`
	BytesReceived uint64  `json:"bytes_received"`
	RateSent      float64 `json:"rate_sent"`
	RateReceived  float64 `json:"rate_received"`
}

// ClientStatus is one client of a server's config.
type ClientStatus struct {
	Name string `json:"name"`
	// Keys are the fingerprints of the keys it may hold (two while it
	// moves from one to the other).
	Keys []string `json:"keys"`
	// Links are its links up now (one; two briefly while it redials).
	Links int `json:"links"`
	// LastSeen is when it last had a link: now while it has one; nil if
	// it never had one since the server started.
	LastSeen *time.Time `json:"last_seen,omitempty"`
}

// LinkStatus is one link.
type LinkStatus struct {
	Link   uint64 `json:"link"`             // this end's number for it: 1 for its first link
	Peer   string `json:"peer"`             // the other end's address
	Client string `json:"client,omitempty"` // server: the client's name
	Key    string `json:"key,omitempty"`    // the fingerprint of the key it was made with
	// UpSince is when its handshake completed and it began to carry
	// streams.
	UpSince time.Time `json:"up_since"`
	// Rekeys: epochs begun since the handshake, by this end (sent) and
	// by the peer (received), and when the last began (nil: none yet).
	RekeysSent       uint64     `json:"rekeys_sent"`
	RekeysReceived   uint64     `json:"rekeys_received"`
	LastRekeySent    *time.Time `json:"last_rekey_sent,omitempty"`
	LastRekeyReceive *time.Time `json:"last_rekey_received,omitempty"`
	Traffic
	// Streams are its open streams by kind and name (server).
	Streams []Streams `json:"streams,omitempty"`
}

// Streams counts open streams of one kind and name: service NAME, socks,
// udp NAME, reverse LISTEN (server); forward SERVICE, socks, udp SERVICE,
// reverse LISTEN (client).
type Streams struct {
	Kind   string `json:"kind"`
	Name   string `json:"name,omitempty"`
	Active int    `json:"active"`
}

// EngineFrames are one engine's frames and ciphertext bytes sealed and
// opened, and the frames it failed that software redid.
type EngineFrames struct {
	Engine       string `json:"engine"`
	FramesSealed uint64 `json:"frames_sealed"`
	FramesOpened uint64 `json:"frames_opened"`
	BytesSealed  uint64 `json:"bytes_sealed"`
	BytesOpened  uint64 `json:"bytes_opened"`
	Fallbacks    uint64 `json:"fallbacks"`
	Out          bool   `json:"out,omitempty"` // taken out by an engine check
}

// sample is the counters at one time.
type sample struct {
	t          time.Time
	sent, recv uint64
}

// rateMeter keeps the last rateSamples samples of one set of counters.
type rateMeter struct {
	mu   sync.Mutex
	ring [rateSamples]sample
	n    int // samples in ring
	next int // where the next goes
}

func (m *rateMeter) add(s sample) {
	m.mu.Lock()
	m.ring[m.next] = s
	m.next = (m.next + 1) % rateSamples
	m.n = min(m.n+1, rateSamples)
	m.mu.Unlock()
}

// rate is the bytes a second from the oldest sample kept to now.
func (m *rateMeter) rate(now sample) (sent, recv float64) {
	m.mu.Lock()
	if m.n == 0 {
		m.mu.Unlock()
		return 0, 0
	}
	old := m.ring[(m.next-m.n+rateSamples)%rateSamples]
	m.mu.Unlock()
	dt := now.t.Sub(old.t).Seconds()
	if dt <= 0 {
		return 0, 0
	}
	// A counter never goes back; guard anyway against a sample taken
	// between two adds of one Write to a parent chain.
	// Whole bytes a second: the JSON need not carry 15 digits of noise.
	return math.Round(float64(now.sent-min(old.sent, now.sent)) / dt), math.Round(float64(now.recv-min(old.recv, now.recv)) / dt)
}

func trafficNow(t *record.Traffic, now time.Time) sample {
	return sample{t: now, sent: t.Sent.Load(), recv: t.Received.Load()}
}

// traffic is what a Traffic says now, with its rate from m.
func (m *rateMeter) traffic(t *record.Traffic, now time.Time) Traffic {
	s := trafficNow(t, now)
	rs, rr := m.rate(s)
	return Traffic{BytesSent: s.sent, BytesReceived: s.recv, RateSent: rs, RateReceived: rr}
}

// streamKey names a kind of stream, and its service or address.
type streamKey struct{ kind, name string }

// Tally counts open streams by kind and name.
type Tally struct {
	mu sync.Mutex
	n  map[streamKey]int
}

// open counts a stream of kind and name until the returned func is
// called (once). A nil tally counts nothing (a link made by a test
// without serveConn).
func (t *Tally) Open(kind, name string) func() {
	if t == nil {
		return func() {}
	}
	k := streamKey{kind, name}
	t.mu.Lock()
	if t.n == nil {
		t.n = map[streamKey]int{}
	}
	t.n[k]++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		if t.n[k]--; t.n[k] <= 0 {
			delete(t.n, k) // keys come and go: keep none at zero
		}
		t.mu.Unlock()
	}
}

// List is the open streams, by kind and name.
func (t *Tally) List() []Streams {
	t.mu.Lock()
	out := make([]Streams, 0, len(t.n))
	for k, n := range t.n {
		out = append(out, Streams{Kind: k.kind, Name: k.name, Active: n})
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Link is one link's part of the live view.
type Link struct {
	n       uint64 // the end's number for it
	peer    string
	name    string // server: the client's name; client: the server's address
	key     string // the fingerprint of its key
	up      time.Time
	rc      *record.Conn
	meter   rateMeter
	streams Tally
}

// Open counts a stream of the link (Tally.Open); nil-safe.
func (l *Link) Open(kind, name string) func() {
	if l == nil {
		return func() {}
	}
	return l.streams.Open(kind, name)
}

// View is one end's part of the live view: its traffic, the links up and
// their rates. It lives in the end's counters.
type View struct {
	// Total is every link's bytes: the root of the links' Parent chains.
	Total record.Traffic
	meter rateMeter

	mu      sync.Mutex
	started time.Time
	seq     uint64
	links   map[*Link]struct{}
	// Client only: the last handshake attempt and its error.
	attempt    time.Time
	attemptErr string
	// Streams are the client's open streams by forward (on the server,
	// each link has its own).
	Streams Tally
}

// NewView starts the end's counters at 0 now: its rate until the
// sampler's first tick is since then.
func NewView() *View {
	v := &View{links: map[*Link]struct{}{}}
	v.meter.add(sample{t: time.Now()})
	return v
}

// LinkUp registers the link rc (to peer; name: the client's name on the
// server, the server's address on the client; key: its key's
// fingerprint); LinkDown ends it.
func (v *View) LinkUp(rc *record.Conn, peer net.Addr, name, key string) *Link {
	now := time.Now()
	ls := &Link{peer: peer.String(), name: name, key: key, up: now, rc: rc}
	ls.meter.add(sample{t: now}) // the rate until the first tick is since the link came up
	v.mu.Lock()
	v.seq++
	ls.n = v.seq
	v.links[ls] = struct{}{}
	v.attempt, v.attemptErr = now, ""
	v.mu.Unlock()
	return ls
}

// LinkDown ends a link LinkUp registered.
func (v *View) LinkDown(ls *Link) {
	v.mu.Lock()
	delete(v.links, ls)
	v.mu.Unlock()
}

// Attempted records a handshake (or dial) that failed with err.
func (v *View) Attempted(err error) {
	v.mu.Lock()
	v.attempt, v.attemptErr = time.Now(), err.Error()
	v.mu.Unlock()
}

// linkList is the links up, oldest first.
func (v *View) linkList() []*Link {
	v.mu.Lock()
	out := make([]*Link, 0, len(v.links))
	for ls := range v.links {
		out = append(out, ls)
	}
	v.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	return out
}

// Start records that the end began to serve (Status.Started): now.
func (v *View) Start() {
	v.mu.Lock()
	v.started = time.Now()
	v.mu.Unlock()
}

// Sample takes the end's counters and every link's now; the end calls it
// every RateTick.
func (v *View) Sample() {
	now := time.Now()
	v.meter.add(trafficNow(&v.Total, now))
	for _, ls := range v.linkList() {
		ls.meter.add(trafficNow(ls.rc.Traffic(), now))
	}
}

// Fill sets the links' and the end's part of st at now.
func (v *View) Fill(st *Status, now time.Time) {
	st.Traffic = v.meter.traffic(&v.Total, now)
	v.mu.Lock()
	st.Started = v.started
	if st.Role == "client" && !v.attempt.IsZero() {
		at := v.attempt
		st.LastAttempt, st.LastError = &at, v.attemptErr
	}
	v.mu.Unlock()
	st.Links = []LinkStatus{}
	for _, ls := range v.linkList() {
		l := LinkStatus{Link: ls.n, Peer: ls.peer, Key: ls.key, UpSince: ls.up, Traffic: ls.meter.traffic(ls.rc.Traffic(), now), Streams: ls.streams.List()}
		if st.Role == "server" {
			l.Client = ls.name
		}
		var last time.Time
		if l.RekeysSent, last = ls.rc.Rekeys(engine.Encrypt); !last.IsZero() {
			l.LastRekeySent = &last
		}
		var lastRecv time.Time
		if l.RekeysReceived, lastRecv = ls.rc.Rekeys(engine.Decrypt); !lastRecv.IsZero() {
			l.LastRekeyReceive = &lastRecv
		}
		st.Links = append(st.Links, l)
	}
}

// WritePrometheus writes the end's traffic and that of each link up:
//
//	offload_link_bytes_total{role,dir}                every link since the start
//	offload_link_live_bytes_total{role,link,NAME,dir} each link up now
//	offload_link_live_since_seconds{role,link,NAME}   when it came up (Unix time)
//
// NAME is client (server) or server (client); dir is sent or received.
func (v *View) WritePrometheus(w io.Writer, role string) {
	metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_link_bytes_total{role=%q,dir="sent"}`, role), v.Total.Sent.Load())
	metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_link_bytes_total{role=%q,dir="received"}`, role), v.Total.Received.Load())
	label := "client"
	if role == "client" {
		label = "server"
	}
	for _, ls := range v.linkList() {
		id := fmt.Sprintf(`role=%q,link="%d",%s=%s`, role, ls.n, label, metrics.Label(ls.name))
		t := ls.rc.Traffic()
		metrics.WriteCounterUint64(w, `offload_link_live_bytes_total{`+id+`,dir="sent"}`, t.Sent.Load())
		metrics.WriteCounterUint64(w, `offload_link_live_bytes_total{`+id+`,dir="received"}`, t.Received.Load())
		metrics.WriteGaugeUint64(w, `offload_link_live_since_seconds{`+id+`}`, uint64(ls.up.Unix()))
	}
}

// LogFields are the status line's traffic: bytes since the start and the
// rate now (bytes a second over the last rateWindow).
func (v *View) LogFields() []zap.Field {
	t := v.meter.traffic(&v.Total, time.Now())
	return []zap.Field{
		zap.Uint64("bytes_sent", t.BytesSent), zap.Uint64("bytes_received", t.BytesReceived),
		zap.String("rate_sent", FormatRate(t.RateSent)), zap.String("rate_received", FormatRate(t.RateReceived)),
	}
}

// FormatBytes formats n bytes for people: "0 B", "512 B", "1.50 KiB",
// "3.25 GiB".
func FormatBytes(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, unit := float64(n), 0
	for v >= 1024 && unit < 5 {
		v /= 1024
		unit++
	}
	return fmt.Sprintf("%.2f %s", v, [...]string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}[unit])
}

// FormatRate formats a rate in bytes a second: "0 B/s", "1.20 MiB/s".
func FormatRate(r float64) string {
	if r < 0.5 {
		return "0 B/s"
	}
	return FormatBytes(uint64(r+0.5)) + "/s"
}

// WaitingSession is a session whose link died, kept for its client to
// resume it within resume_window (docs/protocol.md section 4).
type WaitingSession struct {
	Client    string    `json:"client,omitempty"` // on the server
	Server    string    `json:"server,omitempty"` // on the client: where it resumes
	Since     time.Time `json:"since"`            // when its link went
	Streams   int       `json:"streams"`          // streams it holds
	BytesKept int       `json:"bytes_kept"`       // sent and unacknowledged, kept to resend
}
