package main

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// More than one server, with the built binaries: two servers behind a real
// HAProxy (TestE2EHAProxy), and a client failing over on its own on ::1
// (TestE2EFailoverIPv6). docs/tunnel.md, "More than one server".

func readExample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// yamlAddrs is a YAML flow list of quoted addresses.
func yamlAddrs(addrs ...string) string {
	q := make([]string, len(addrs))
	for i, a := range addrs {
		q[i] = "'" + a + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// writeServerConfig writes a server config from examples/server.yaml and
// returns its path; extra is appended.
func writeServerConfig(t *testing.T, dir, name, listen, metrics string, services map[string]string, extra string) string {
	t.Helper()
	var svc strings.Builder
	for n, target := range services {
		fmt.Fprintf(&svc, "  %s: '%s'\n", n, target)
	}
	s := readExample(t, "server.yaml")
	s = edit(t, "server.yaml", s, `(?m)^listen: .*$`, "listen: '"+listen+"'")
	s = edit(t, "server.yaml", s, `(?m)^services:\n(  .*\n)+`, "services:\n"+svc.String())
	s = edit(t, "server.yaml", s, `(?m)^# metrics: .*$`, "metrics: '"+metrics+"'")
	s = edit(t, "server.yaml", s, `(?m)^drain_timeout: .*$`, "drain_timeout: 2s")
	s += extra
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeClientConfig writes a client config from examples/client.yaml:
// servers (one: server:, more: servers:), a forward per service
// (service → listen address) and metrics.
func writeClientConfig(t *testing.T, dir, name string, servers []string, forwards map[string]string, metrics string) string {
	t.Helper()
	var fwd strings.Builder
	for service, listen := range forwards {
		fmt.Fprintf(&fwd, "  - listen: '%s'\n    service: %s\n", listen, service)
	}
	server := "server: '" + servers[0] + "'"
	if len(servers) > 1 {
		server = "servers: " + yamlAddrs(servers...)
	}
	c := readExample(t, "client.yaml")
	c = edit(t, "client.yaml", c, `(?m)^server: .*$`, server)
	c = edit(t, "client.yaml", c, `(?m)^forwards:\n(  .*\n)+`, "forwards:\n"+fwd.String())
	c = edit(t, "client.yaml", c, `(?m)^  min: .*$`, "  min: 100ms")
	c = edit(t, "client.yaml", c, `(?m)^  max: .*$`, "  max: 1s")
	c = edit(t, "client.yaml", c, `(?m)^drain_timeout: .*$`, "drain_timeout: 2s")
	c += "metrics: '" + metrics + "'\n"
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fileSeed seeds the object the "file" target serves.
const fileSeed = 77

// serveFile is the "file" target: it reads an 8-byte offset and a length,
// then sends bytes [offset, length) of testutil.Stream(fileSeed), paced at
// about 16 MiB/s, so that a transfer is still running when a server is
// killed.
func serveFile(c net.Conn) {
	var req [16]byte
	if _, err := io.ReadFull(c, req[:]); err != nil {
		return
	}
	off, total := int64(binary.BigEndian.Uint64(req[:8])), int64(binary.BigEndian.Uint64(req[8:]))
	src := testutil.Stream(fileSeed)
	if _, err := io.CopyN(io.Discard, src, off); err != nil {
		return
	}
	buf := make([]byte, 32<<10)
	for left := total - off; left > 0; {
		n := min(int64(len(buf)), left)
		_, _ = io.ReadFull(src, buf[:n])
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
		left -= n
		time.Sleep(2 * time.Millisecond)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_, _ = io.Copy(io.Discard, c)
}

// fetchResult is what one download got.
type fetchResult struct {
	sum     [sha256.Size]byte
	got     int64
	resumes int
	errs    []string
}

// fetch downloads total bytes of the "file" target through addr, as a
// transfer tool with resume does: when a connection is cut it reconnects
// and asks for the rest from the byte it has. It returns the SHA-256 of
// everything that arrived. progress gets the bytes so far.
func fetch(addr string, total int64, deadline time.Time, progress *atomic.Int64) fetchResult {
	h := sha256.New()
	var r fetchResult
	for r.got < total && time.Now().Before(deadline) {
		err := func() error {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(deadline)
			var req [16]byte
			binary.BigEndian.PutUint64(req[:8], uint64(r.got))
			binary.BigEndian.PutUint64(req[8:], uint64(total))
			if _, err := c.Write(req[:]); err != nil {
				return err
			}
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				h.Write(buf[:n])
				r.got += int64(n)
				progress.Store(r.got)
				if errors.Is(err, io.EOF) && r.got == total {
					return nil
				}
				if err != nil {
					return fmt.Errorf("after %d bytes: %w", r.got, err)
				}
			}
		}()
		if err != nil {
			r.errs = append(r.errs, err.Error())
			if r.got < total {
				r.resumes++
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	copy(r.sum[:], h.Sum(nil))
	return r
}

// wantSum is the SHA-256 of the first n bytes of the file target's object.
func wantSum(n int64) [sha256.Size]byte {
	h := sha256.New()
	_, _ = io.CopyN(h, testutil.Stream(fileSeed), n)
	var s [sha256.Size]byte
	copy(s[:], h.Sum(nil))
	return s
}

// metricValue returns the value of the metric line that starts with name
// (with its labels) in a scrape, or -1.
func metricValue(scrape, name string) float64 {
	for _, l := range strings.Split(scrape, "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}

// haproxyConfig puts two listeners in front of servers s1 and s2 (tunnel
// addresses and metrics addresses): one checks /healthz on the metrics
// port over HTTP, the other checks the tunnel port at L4 (HAProxy then
// sends a PROXY LOCAL header with its checks). balance first sends every
// client to s1 while it is up; redispatch retries a failed connect on the
// other server before the checks have noticed. HAProxy connects from
// 127.0.0.2, the clients from 127.0.0.1, so the servers' logs show which
// address they believe.
func haproxyConfig(httpBind, l4Bind string, tunnels, metrics [2]string) string {
	return fmt.Sprintf(`global
    log stderr format raw local0 info
    maxconn 512

defaults
    mode tcp
    log global
    option tcplog
    option redispatch
    retries 2
    timeout connect 1s
    timeout client 2m
    timeout server 2m
    timeout check 1s

listen offload_http_check
    bind %s
    balance first
    option httpchk GET /healthz
    default-server send-proxy-v2 source 127.0.0.2 inter 300ms fall 2 rise 2
    server s1 %s check port %s
    server s2 %s check port %s

listen offload_l4_check
    bind %s
    balance first
    default-server send-proxy-v2 source 127.0.0.2 inter 300ms fall 2 rise 2
    server s1 %s check
    server s2 %s check
`, httpBind, tunnels[0], port(metrics[0]), tunnels[1], port(metrics[1]), l4Bind, tunnels[0], tunnels[1])
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// TestE2EHAProxy runs HAProxy (mode tcp, send-proxy-v2, health checks) in
// front of two offload servers with proxy_protocol, and two clients
// through it, each downloading two files with resume. The server that
// carries both links (s1, by balance first) is killed mid-transfer: the
// clients carry on through the other (the transfers resume and arrive
// complete, SHA-256 checked; new streams work), whose logs show the
// clients' address (not HAProxy's), and HAProxy's L4 checks arrive there
// as LOCAL health checks.
func TestE2EHAProxy(t *testing.T) {
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("haproxy not found, and CI=true requires this test (scripts/deps.sh installs the Debian package haproxy): %v", err)
		}
		t.Skipf("haproxy not found (scripts/deps.sh installs the Debian package haproxy; under CI=true this fails): %v", err)
	}
	if c, err := dialFromHost("127.0.0.2", "127.0.0.1:1"); err != nil && !isRefused(err) {
		t.Skipf("can't dial from 127.0.0.2: %v", err)
	} else if c != nil {
		c.Close()
	}
	testutil.LeakCheck(t)
	bin := buildOffload(t)
	dir := t.TempDir()
	keygen(t, bin, filepath.Join(dir, "offload.key"))
	fileT := startE2ETarget(t, serveFile)
	echoT := startE2ETarget(t, testutil.Echo)
	services := map[string]string{"file": fileT.ln.Addr().String(), "echo": echoT.ln.Addr().String()}

	var tunnels, metricsAddrs [2]string
	var servers [2]*proc
	var serverCfgs [2]string
	for i := range 2 {
		tunnels[i], metricsAddrs[i] = testutil.FreePort(t), testutil.FreePort(t)
		serverCfgs[i] = writeServerConfig(t, dir, fmt.Sprintf("server%d.yaml", i+1), tunnels[i], metricsAddrs[i], services,
			"proxy_protocol: true\nproxy_protocol_from: [127.0.0.2]\n")
		servers[i] = startProc(t, fmt.Sprintf("server s%d", i+1), bin, "server", "-c", serverCfgs[i])
	}
	httpBind, l4Bind := testutil.FreePort(t), testutil.FreePort(t)
	hcfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(hcfg, []byte(haproxyConfig(httpBind, l4Bind, tunnels, metricsAddrs)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(haproxy, "-c", "-f", hcfg).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	hap := startProc(t, "haproxy", haproxy, "-db", "-f", hcfg)
	waitFor(t, 15*time.Second, "haproxy listening", func() error {
		c, err := net.Dial("tcp", httpBind)
		if err == nil {
			c.Close()
		}
		return err
	})

	type client struct {
		proc     *proc
		forwards map[string]string
		metrics  string
	}
	var clients []client
	for i, front := range []string{httpBind, l4Bind} {
		c := client{forwards: map[string]string{"file": testutil.FreePort(t), "echo": testutil.FreePort(t)}, metrics: testutil.FreePort(t)}
		cfg := writeClientConfig(t, dir, fmt.Sprintf("client%d.yaml", i+1), []string{front}, c.forwards, c.metrics)
		c.proc = startProc(t, fmt.Sprintf("client %d", i+1), bin, "client", "-c", cfg)
		clients = append(clients, c)
	}
	for _, c := range clients {
		waitFor(t, 20*time.Second, "first round trip through haproxy", func() error { return testutil.EchoRoundTrip(c.forwards["echo"], 1000, 1) })
	}
	// balance first puts both links on s1; if a check flapped under load
	// and they went to s2, that one is the victim.
	victim := -1
	waitFor(t, 15*time.Second, "both links on one server (balance first)", func() error {
		var got []float64
		for i, a := range metricsAddrs {
			m, err := scrape(a)
			if err != nil {
				return err
			}
			got = append(got, metricValue(m, "offload_links_active"))
			if got[i] == 2 {
				victim = i
				return nil
			}
		}
		return fmt.Errorf("links per server: %v", got)
	})
	survivor := 1 - victim
	vName, sName := fmt.Sprintf("s%d", victim+1), fmt.Sprintf("s%d", survivor+1)

	// Two downloads per client, the victim killed once each has made
	// progress.
	total := int64(24 << 20)
	if testing.Short() {
		total = 6 << 20
	}
	deadline := time.Now().Add(3 * time.Minute)
	type job struct {
		client, n int
		progress  atomic.Int64
		res       fetchResult
	}
	var jobs []*job
	var wg sync.WaitGroup
	for ci, c := range clients {
		for n := range 2 {
			j := &job{client: ci + 1, n: n}
			jobs = append(jobs, j)
			wg.Add(1)
			go func() {
				defer wg.Done()
				j.res = fetch(c.forwards["file"], total, deadline, &j.progress)
			}()
		}
	}
	waitFor(t, 60*time.Second, "every download past 1 MiB", func() error {
		for _, j := range jobs {
			if p := j.progress.Load(); p < 1<<20 {
				return fmt.Errorf("client %d download %d at %d bytes", j.client, j.n, p)
			}
		}
		return nil
	})
	var at []string
	for _, j := range jobs {
		at = append(at, fmt.Sprintf("%.1f", float64(j.progress.Load())/(1<<20)))
	}
	killed := time.Now()
	servers[victim].Kill()
	wg.Wait()
	resumed := 0
	want := wantSum(total)
	for _, j := range jobs {
		resumed += j.res.resumes
		if j.res.got != total || j.res.sum != want {
			t.Errorf("client %d download %d: %d of %d bytes, SHA-256 %x, want %x; errors: %q", j.client, j.n, j.res.got, total, j.res.sum[:8], want[:8], j.res.errs)
		}
	}
	if resumed < len(jobs) {
		t.Errorf("%d resumes for %d downloads cut by the kill, want at least one each", resumed, len(jobs))
	}
	// New streams go through the survivor.
	for ci, c := range clients {
		for k := range 3 {
			if err := testutil.EchoRoundTrip(c.forwards["echo"], 1<<20, uint64(10+k)); err != nil {
				t.Errorf("client %d: new stream %d after the kill: %v", ci+1, k, err)
			}
		}
	}
	carried := time.Since(killed)

	m, err := scrape(metricsAddrs[survivor])
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"offload_links_active":                     2,
		`offload_proxy_headers_total{result="ok"}`: 2,
	} {
		if v := metricValue(m, name); v < want {
			t.Errorf("%s: %s = %v, want at least %v", sName, name, v, want)
		}
	}
	checks := metricValue(m, `offload_proxy_headers_total{result="health_check"}`)
	if checks < 1 {
		t.Errorf("%s counted no LOCAL health checks from haproxy's L4 checks:\n%s", sName, m)
	}
	// The clients' address, not HAProxy's 127.0.0.2.
	remote := regexp.MustCompile(`link up\s.*"remote": "([0-9.]+):\d+"`).FindAllStringSubmatch(servers[survivor].Out.String(), -1)
	if len(remote) < 2 {
		t.Errorf("%s logged %d 'link up' lines with a remote, want 2:\n%s", sName, len(remote), servers[survivor].Out)
	}
	seen := map[string]bool{}
	for _, r := range remote {
		seen[r[1]] = true
		if r[1] != "127.0.0.1" {
			t.Errorf("%s logged a link from %s, want the clients' 127.0.0.1 (not haproxy's 127.0.0.2)", sName, r[1])
		}
	}
	// Straight to the survivor, past HAProxy: not a balancer, reset unread.
	if c, err := net.Dial("tcp", tunnels[survivor]); err == nil {
		_, _ = c.Write([]byte("hello"))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeoutErr(err) {
			t.Errorf("a direct connection to %s was not refused: %v", sName, err)
		}
		c.Close()
	}
	t.Logf("haproxy %s: 2 clients, %d downloads of %d MiB; %s killed at %s MiB; %d resumes; all SHA-256 ok; new streams through %s ok %.1fs after the kill; %s saw links from %v and %v LOCAL health checks",
		haproxyVersion(haproxy), len(jobs), total>>20, vName, strings.Join(at, "/"), resumed, sName, carried.Seconds(), sName, slices.Sorted(maps.Keys(seen)), checks)

	for _, c := range clients {
		if code := stop(t, c.proc); code != 0 {
			t.Errorf("%s exited %d", c.proc.Name, code)
		}
	}
	if code := stop(t, servers[survivor]); code != 0 {
		t.Errorf("%s exited %d", sName, code)
	}
	hap.Kill()
}

func haproxyVersion(bin string) string {
	out, _ := exec.Command(bin, "-v").Output()
	line, _, _ := strings.Cut(string(out), "\n")
	f := strings.Fields(line)
	if len(f) >= 3 {
		return f[2]
	}
	return "?"
}

func dialFromHost(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	return d.Dial("tcp", addr)
}

func isRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection refused")
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestE2EFailoverIPv6: the built client with servers: [dead, live] on ::1
// links to the second; server listen, service target, forward, metrics and
// /healthz are all IPv6 literals.
func TestE2EFailoverIPv6(t *testing.T) {
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback on this machine: %v", err)
	} else {
		ln.Close()
	}
	testutil.LeakCheck(t)
	bin := buildOffload(t)
	dir := t.TempDir()
	keygen(t, bin, filepath.Join(dir, "offload.key"))
	echo := testutil.ServeOn(t, "::1", testutil.Echo)

	dead, live := testutil.FreePortOn(t, "::1"), testutil.FreePortOn(t, "::1")
	smetrics, cmetrics := testutil.FreePortOn(t, "::1"), testutil.FreePortOn(t, "::1")
	scfg := writeServerConfig(t, dir, "server.yaml", live, smetrics, map[string]string{"echo": echo}, "")
	fwd := testutil.FreePortOn(t, "::1")
	ccfg := writeClientConfig(t, dir, "client.yaml", []string{dead, live}, map[string]string{"echo": fwd}, cmetrics)
	if code, out, stderr := runCmd(t, "validate", ccfg, scfg); code != 0 || !strings.Contains(out, "2 servers") {
		t.Fatalf("validate: exit %d: %s%s", code, out, stderr)
	}
	srv := startProc(t, "server", bin, "server", "-c", scfg)
	cli := startProc(t, "client", bin, "client", "-c", ccfg)
	waitFor(t, 20*time.Second, "a round trip over ::1", func() error { return testutil.EchoRoundTrip(fwd, 1<<20, 3) })
	out := cli.Out.String()
	if !strings.Contains(out, "link failed; redialling") || !strings.Contains(out, dead) ||
		!regexp.MustCompile(`link up\s.*"server": "`+regexp.QuoteMeta(live)+`"`).MatchString(out) {
		t.Errorf("client log: want a failed dial of %s, then link up on %s:\n%s", dead, live, out)
	}
	for _, a := range []string{smetrics, cmetrics} {
		code, body := httpGet(t, "http://"+a+"/healthz")
		if code != 200 || body != "ok\n" {
			t.Errorf("/healthz on %s: %d %q", a, code, body)
		}
	}
	m, err := scrape(cmetrics)
	if err != nil {
		t.Fatal(err)
	}
	if v := metricValue(m, `offload_server{server="`+live+`"}`); v != 1 || metricValue(m, "offload_failovers_total") < 1 {
		t.Errorf("client metrics: want offload_server 1 for %s and a failover:\n%s", live, m)
	}
	if code := stop(t, cli); code != 0 {
		t.Errorf("client exited %d", code)
	}
	if code := stop(t, srv); code != 0 {
		t.Errorf("server exited %d", code)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
