package tunnel

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/live"
	"github.com/offload-dev/offload/tunnel/metricsserver"
)

// metricValue is the value of the one series line in body, or -1.
func metricValue(body, series string) int64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9]+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseInt(m[1], 10, 64)
	return v
}

// While a transfer is under way, its stream still open, the byte
// counters of /metrics and Status have moved: per client, per link and
// per end, with a rate, and the stream shows by service and by forward.
// Before, offload_client_stream_bytes_total moved only when the stream
// ended, and there was no per-link view at all.
func TestStatusDuringTransfer(t *testing.T) {
	testutil.LeakCheck(t)
	const sent = 300 << 10
	held, target := testutil.ServeHeld(t, sent)
	addrs, srv, cli, _, _ := pair(t, map[string]string{"held": target}, "held")
	held.Send(t, addrs["held"])

	ss := srv.Status()
	if ss.Role != "server" || ss.Suite == "" || len(ss.Engines) == 0 || ss.Engines[0] != "software" {
		t.Errorf("server header: %+v", ss)
	}
	if len(ss.Links) != 1 {
		t.Fatalf("server links: %+v", ss.Links)
	}
	l := ss.Links[0]
	if l.Link != 1 || l.Client != DefaultClient || l.Peer == "" || l.UpSince.IsZero() || l.UpSince.After(ss.Time) {
		t.Errorf("server link: %+v", l)
	}
	if l.BytesReceived < sent || l.RateReceived <= 0 || ss.BytesReceived < sent || ss.RateReceived <= 0 {
		t.Errorf("server traffic while the stream is open: link %+v, end %+v", l.Traffic, ss.Traffic)
	}
	if len(l.Streams) != 1 || l.Streams[0] != (live.Streams{Kind: "service", Name: "held", Active: 1}) {
		t.Errorf("server link streams: %+v", l.Streams)
	}
	if ss.StreamsActive != 1 || len(ss.Frames) != 1 || ss.Frames[0].FramesOpened == 0 {
		t.Errorf("server streams %d, frames %+v", ss.StreamsActive, ss.Frames)
	}

	cs := cli.Status()
	if cs.Role != "client" || cs.Server == "" || len(cs.Links) != 1 || cs.Links[0].Peer != cs.Server {
		t.Fatalf("client status: %+v", cs)
	}
	if cs.Links[0].BytesSent < sent || cs.BytesSent < sent || cs.RateSent <= 0 {
		t.Errorf("client traffic: link %+v, end %+v", cs.Links[0].Traffic, cs.Traffic)
	}
	if len(cs.ClientStreams) != 1 || cs.ClientStreams[0] != (live.Streams{Kind: "forward", Name: "held", Active: 1}) {
		t.Errorf("client streams: %+v", cs.ClientStreams)
	}

	set := metrics.NewSet()
	srv.RegisterMetrics(set)
	cli.RegisterMetrics(set)
	var b strings.Builder
	set.WritePrometheus(&b)
	body := b.String()
	for _, series := range []string{
		`offload_client_link_bytes_total{client="default",dir="received"}`,
		`offload_link_bytes_total{role="server",dir="received"}`,
		`offload_link_bytes_total{role="client",dir="sent"}`,
		`offload_link_live_bytes_total{role="server",link="1",client="default",dir="received"}`,
		`offload_link_live_bytes_total{role="client",link="1",server="` + cs.Server + `",dir="sent"}`,
	} {
		if v := metricValue(body, series); v < sent {
			t.Errorf("%s = %d while the stream is open, want at least %d", series, v, sent)
		}
	}
	if v := metricValue(body, `offload_link_live_since_seconds{role="server",link="1",client="default"}`); v != l.UpSince.Unix() {
		t.Errorf("link up since %d in metrics, %d in status", v, l.UpSince.Unix())
	}

	// The status line has the traffic and its rate.
	core, logs := observer.New(zap.InfoLevel)
	cli.ctr.logStatus(zap.New(core))
	f := logs.All()[0].ContextMap()
	if n, _ := f["bytes_sent"].(uint64); n < sent || f["rate_sent"] == "0 B/s" || f["rate_sent"] == nil {
		t.Errorf("status line: %v", f)
	}
}

// statusGET GETs /status with an optional Authorization header.
func statusGET(t *testing.T, addr, auth string) (int, string) {
	t.Helper()
	code, body, err := testutil.HTTP("GET", addr, "/status", auth)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

// /status serves the JSON of Status under the token of /metrics: without
// it, or with another, it is 401 and shows nothing; without Status set,
// there is no /status.
func TestStatusEndpoint(t *testing.T) {
	testutil.LeakCheck(t)
	held, target := testutil.ServeHeld(t, 1000)
	addrs, srv, _, _, _ := pair(t, map[string]string{"held": target}, "held")
	held.Send(t, addrs["held"])
	const token = "status-token-0123456789"
	addr := startMetricsServer(t, metrics.NewSet(), metricsserver.Options{Token: []byte(token), Status: func() any { return srv.Status() }})
	for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Basic " + token} {
		code, body := statusGET(t, addr, auth)
		if code != 401 || strings.Contains(body, "links") {
			t.Errorf("Authorization %q: %d %q, want 401 and no status", auth, code, body)
		}
	}
	code, body := statusGET(t, addr, "Bearer "+token)
	if code != 200 {
		t.Fatalf("with the token: %d %q", code, body)
	}
	var st live.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, body)
	}
	if st.Role != "server" || len(st.Links) != 1 || st.Links[0].Client != DefaultClient || st.Links[0].BytesReceived < 1000 ||
		len(st.Links[0].Streams) != 1 || st.Links[0].Streams[0].Name != "held" {
		t.Errorf("status over HTTP: %+v", st)
	}
	var raw map[string]any
	_ = json.Unmarshal([]byte(body), &raw)
	link, _ := raw["links"].([]any)[0].(map[string]any)
	for _, k := range []string{"link", "peer", "client", "up_since", "rekeys_sent", "rekeys_received", "bytes_sent", "bytes_received", "rate_sent", "rate_received", "streams"} {
		if _, ok := link[k]; !ok {
			t.Errorf("link JSON has no %q: %v", k, link)
		}
	}
	// Without Status in the options, /status is not there.
	if code, _ := statusGET(t, startMetricsServer(t, metrics.NewSet(), metricsserver.Options{}), ""); code != 404 {
		t.Errorf("no Status: %d, want 404", code)
	}
}

// A server's status lists every client of its config: the one connected
// (its link, now as last seen), one that was connected and left (last
// seen then), one never seen; each with its keys' fingerprints, which are
// the fingerprints the clients' own status shows. A client whose server is
// down says when it dials next and why the last dial failed.
func TestStatusClientsAndKeys(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	tg := startTarget(t, testutil.Echo)
	keyA, keyB, keyC := testPSK(1), testPSK(2), testPSK(3)
	opt := testOptions(log)
	all := Access{AllServices: true}
	saddr, srv, _ := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"echo": tg.addr()}, Clients: []ServerClient{
		{Name: "alpha", Keys: [][]byte{keyA}, Access: all},
		{Name: "beta", Keys: [][]byte{keyB}, Access: all},
		{Name: "gamma", Keys: [][]byte{keyC, testPSK(4)}, Access: all},
	}})
	addrsA, cliA, _ := clientOf(t, log, saddr, keyA, "echo")
	_, _, runB := clientOf(t, log, saddr, keyB, "echo")
	openEcho(t, addrsA["echo"])
	eventually(t, time.Minute, "both clients linked", func() bool { return srv.ctr.links.Load() == 2 })
	runB.stop(t)
	eventually(t, time.Minute, "beta gone", func() bool { return srv.ctr.links.Load() == 1 })

	st := srv.Status()
	if len(st.Clients) != 3 {
		t.Fatalf("clients %+v; want alpha, beta, gamma", st.Clients)
	}
	a, b, g := st.Clients[0], st.Clients[1], st.Clients[2]
	if a.Name != "alpha" || a.Links != 1 || a.LastSeen == nil || !a.LastSeen.Equal(st.Time) {
		t.Errorf("alpha %+v; want connected, seen now", a)
	}
	if b.Name != "beta" || b.Links != 0 || b.LastSeen == nil || !b.LastSeen.Before(st.Time) {
		t.Errorf("beta %+v; want gone, seen before now", b)
	}
	if g.Name != "gamma" || g.Links != 0 || g.LastSeen != nil || len(g.Keys) != 2 {
		t.Errorf("gamma %+v; want never seen, two keys", g)
	}
	if st.Key != "" {
		t.Errorf("server with clients shows key %q; its clients' keys are in Clients", st.Key)
	}
	stA := cliA.Status()
	if stA.Key != handshake.Fingerprint(keyA) || a.Keys[0] != stA.Key || len(st.Links) != 1 || st.Links[0].Key != stA.Key {
		t.Errorf("fingerprints: client %q, server's alpha %v, link %+v; want the same", stA.Key, a.Keys, st.Links)
	}
	if stA.NextDial != nil || stA.Dialing {
		t.Errorf("linked client: next dial %v, dialing %v", stA.NextDial, stA.Dialing)
	}

	// A client of a server that is down.
	down := testutil.Listen(t)
	downAddr := down.Addr().String()
	_ = down.Close()
	clog, clogs := testutil.ObservedLogger(t)
	_, cliD, _ := startClient(t, ClientConfig{Options: testOptions(clog), Server: downAddr, RedialMin: time.Hour, RedialMax: time.Hour}, "echo")
	waitLog(t, clogs, "link failed; redialling")
	stD := cliD.Status()
	if stD.NextDial == nil || !stD.NextDial.After(stD.Time) || stD.LastError == "" || stD.Dialing {
		t.Errorf("down client: next dial %v (now %v), last error %q, dialing %v; want a next dial ahead and the error", stD.NextDial, stD.Time, stD.LastError, stD.Dialing)
	}
}

// A server with a key_file and no clients shows the key's fingerprint
// and its one client, "default".
func TestStatusServerKey(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	_, srv, _ := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"echo": "127.0.0.1:1"}})
	st := srv.Status()
	if st.Key != handshake.Fingerprint(opt.PSK) || len(st.Clients) != 1 || st.Clients[0].Name != DefaultClient || st.Clients[0].LastSeen != nil {
		t.Errorf("key %q, clients %+v; want %s and one never-seen default client", st.Key, st.Clients, handshake.Fingerprint(opt.PSK))
	}
}
