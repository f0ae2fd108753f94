package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/internal/jsonlite"
	"github.com/offload-dev/offload/tunnel/control"
	"github.com/offload-dev/offload/tunnel/live"
)

// offload status asks a running server or client for its live view, the
// way `wg show` asks the kernel: through the end's control socket
// (tunnel/control), which every end has unless its config says
// control: off, or through its metrics listener (GET /status,
// tunnel/metricsserver/status.go; -addr, or -c with control: off). Both
// serve the same live.Status.

func init() {
	register(&command{
		Name:  "status",
		Short: "show a running server's or client's links, clients, keys, traffic, rates and streams",
		Usage: "-c FILE | -socket PATH | -addr HOST:PORT [-token-file FILE] [-json]",
		Flags: func(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
			file := fs.String("c", "", "the running end's config `FILE`: its control socket (or metrics address and token)")
			socket := fs.String("socket", "", "the end's control socket `PATH`, instead of -c")
			addr := fs.String("addr", "", "the metrics listener's `HOST:PORT`, instead of -c")
			tokenFile := fs.String("token-file", "", "bearer token `FILE` for -addr (the end's metrics_token_file)")
			asJSON := fs.Bool("json", false, "print the status as JSON, as /status serves it")
			return func(ctx context.Context, env *runEnv, args []string) (int, error) {
				if len(args) != 0 || countSet(*file, *socket, *addr) != 1 || (*tokenFile != "" && *addr == "") {
					return 2, errUsage
				}
				body, err := askStatus(ctx, *file, *socket, *addr, *tokenFile)
				if err != nil {
					return 1, err
				}
				if *asJSON {
					_, err := env.Stdout.Write(body)
					return 0, err
				}
				var st live.Status
				if err := jsonlite.Unmarshal(body, &st); err != nil {
					return 1, fmt.Errorf("status: %w", err)
				}
				printStatus(env.Stdout, &st)
				return 0, nil
			}
		},
	})
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// errNoStatus means the config has neither a control socket nor a
// metrics listener to ask.
var errNoStatus = errors.New("control: off and no metrics listener: nothing to ask; remove control: off (or add metrics: 127.0.0.1:9100) and restart the end")

// askStatus is the running end's status as JSON: from the control socket
// of the config file (its metrics listener if it has control: off, or if
// it has no socket there and has a metrics listener: an end started
// before the socket existed), the socket at socket, or the metrics
// listener at addr.
func askStatus(ctx context.Context, file, socket, addr, tokenFile string) ([]byte, error) {
	switch {
	case socket != "":
		return control.Ask(ctx, socket, statusCommand)
	case addr != "":
		var token []byte
		if tokenFile != "" {
			t, err := config.LoadToken(tokenFile)
			if err != nil {
				return nil, err
			}
			token = t
		}
		return fetchStatus(ctx, addr, token)
	}
	cfg, err := config.Load(file)
	if err != nil {
		return nil, err
	}
	var c *config.Common
	switch v := cfg.(type) {
	case *config.Server:
		c = &v.Common
	case *config.Client:
		c = &v.Common
	default:
		return nil, fmt.Errorf("%s: neither a server nor a client config", file)
	}
	if c.Control != "" {
		body, err := control.Ask(ctx, c.Control, statusCommand)
		if err == nil || c.Metrics == "" || !errors.Is(err, os.ErrNotExist) {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
				err = fmt.Errorf("%w (is the end of %s running, as this user or root?)", err, file)
			}
			return body, err
		}
	}
	if c.Metrics == "" {
		return nil, fmt.Errorf("%s: %w", file, errNoStatus)
	}
	token, err := c.LoadMetricsToken()
	if err != nil {
		return nil, err
	}
	return fetchStatus(ctx, dialable(c.Metrics), token)
}

// statusCommand is the control socket's command for the status.
const statusCommand = "status"

// listenControl makes the end's control socket (config's control; nil
// if off) before the end binds anything else, so that the same config
// started twice is refused for that, clearly, first. The caller closes
// it (serveControl's stop does; closing twice is harmless). The default
// socket that cannot be made for another reason (a read-only /var/run,
// a directory of another user's) does not stop the end: it runs without
// one, and serveControl logs why (warn).
func listenControl(c *config.Common) (ln *control.Listener, warn, err error) {
	if c.Control == "" {
		return nil, nil, nil
	}
	ln, err = control.Listen(c.Control)
	switch {
	case err == nil:
		return ln, nil, nil
	case !c.ControlSet() && !errors.Is(err, control.ErrInUse):
		return nil, err, nil
	}
	return nil, nil, c.FieldError("control", err)
}

// closeControl closes ln if there is one.
func closeControl(ln *control.Listener) {
	if ln != nil {
		_ = ln.Close()
	}
}

// serveControl serves the end's status on ln until the returned func is
// called, which stops it and removes the socket. Like the metrics
// listener it outlives ctx, so a status can be read while the end drains.
func serveControl(ctx context.Context, ln *control.Listener, warn error, status func() *live.Status, log *zap.Logger) func() {
	if warn != nil {
		log.Warn("no control socket: offload status -c needs one, or metrics:", zap.Error(warn))
	}
	if ln == nil {
		return func() {}
	}
	log.Info("control socket", zap.String("path", ln.Path()))
	done := make(chan struct{})
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(done)
		err := control.Serve(cctx, ln, map[string]control.Handler{
			statusCommand: func() (any, error) { return status(), nil },
		})
		if err != nil {
			log.Error("control socket failed", zap.Error(err))
		}
	}()
	return func() { stop(); <-done }
}

// dialable is a listen address made one to connect to: an unspecified
// host (0.0.0.0, ::) is this host's loopback.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch ip := net.ParseIP(host); {
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		return net.JoinHostPort("127.0.0.1", port)
	case ip != nil && ip.IsUnspecified():
		return net.JoinHostPort("::1", port)
	}
	return addr
}

// statusTimeout bounds the whole request: the endpoint answers at once.
const statusTimeout = 10 * time.Second

// maxStatusBody caps the answer read: a status is a few KiB per link.
const maxStatusBody = 4 << 20

// fetchStatus GETs /status from addr. It speaks HTTP/1.1 over one
// connection by hand, as the endpoint does, so that the binary carries no
// HTTP client transport (docs/budgets.md).
func fetchStatus(ctx context.Context, addr string, token []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w (is the end running, with this metrics address?)", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := "GET /status HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n"
	if token != nil {
		req += "Authorization: Bearer " + string(token) + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	code, status, body, err := readAnswer(conn)
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer: %w", addr, err)
	}
	switch code {
	case 200:
		return body, nil
	case 401:
		return nil, fmt.Errorf("%s: 401: the end wants its metrics token (metrics_token_file; -token-file with -addr)", addr)
	case 404:
		return nil, fmt.Errorf("%s: 404: no /status there (an offload older than offload status, or not offload)", addr)
	}
	return nil, fmt.Errorf("%s: %s: %s", addr, status, strings.TrimSpace(string(body)))
}

// readAnswer reads the endpoint's one answer: its status line, headers
// and the body up to the close (the endpoint closes after one answer)
// or Content-Length. net/textproto, not net/http's ReadResponse: that
// one links net/http's client side in, 250 KiB of a router's binary.
func readAnswer(conn net.Conn) (code int, status string, body []byte, err error) {
	tp := textproto.NewReader(bufio.NewReader(conn))
	line, err := tp.ReadLine()
	if err != nil {
		return 0, "", nil, err
	}
	proto, status, ok := strings.Cut(line, " ")
	if code, err = strconv.Atoi(strings.SplitN(status, " ", 2)[0]); !ok || err != nil || !strings.HasPrefix(proto, "HTTP/1.") {
		return 0, "", nil, fmt.Errorf("not an HTTP answer: %q", line)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return 0, "", nil, err
	}
	r := io.LimitReader(tp.R, maxStatusBody)
	if n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil && n >= 0 {
		r = io.LimitReader(tp.R, min(n, maxStatusBody))
	}
	body, err = io.ReadAll(r)
	return code, status, body, err
}

// printStatus prints st for people, in the manner of `wg show`: the end,
// then each link, indented.
func printStatus(w io.Writer, st *live.Status) {
	now := st.Time
	row := func(indent, k, v string) { fmt.Fprintf(w, "%s%-18s %s\n", indent, k+":", v) }
	head := st.Role
	switch {
	case st.Listen != "":
		head += " " + st.Listen
	case st.Server != "":
		head += " of " + st.Server
	}
	fmt.Fprintln(w, head)
	if st.Version != "" {
		row("  ", "version", st.Version)
	}
	row("  ", "suite", st.Suite)
	engines := strings.Join(st.Engines, ", ")
	if st.Policy != "" && st.Policy != engines {
		engines = st.Policy + " (" + engines + ")"
	}
	row("  ", "engine", engines)
	if !st.Started.IsZero() {
		row("  ", "started", stamp(st.Started, now))
	}
	if st.Key != "" {
		row("  ", "key", st.Key+" (fingerprint)")
	}
	if st.Role == "client" && len(st.Links) == 0 {
		link := "down"
		switch {
		case st.Dialing:
			link += "; dialling now"
		case st.NextDial != nil:
			link += "; next dial " + until(*st.NextDial, now)
		}
		row("  ", "link", link)
		if st.LastAttempt != nil && st.LastError != "" {
			row("  ", "last error", ago(*st.LastAttempt, now)+": "+st.LastError)
		}
	}
	printTraffic(w, "  ", st.Traffic)
	row("  ", "streams", fmt.Sprintf("%d active; %d ok, %d aborted, %d refused", st.StreamsActive,
		st.StreamsTotal["ok"], st.StreamsTotal["aborted"], st.StreamsTotal["refused"]))
	if len(st.ClientStreams) > 0 {
		row("  ", "open streams", streamList(st.ClientStreams))
	}
	for _, f := range st.Frames {
		v := fmt.Sprintf("%d sealed (%s), %d opened (%s), %d fallbacks", f.FramesSealed, live.FormatBytes(f.BytesSealed),
			f.FramesOpened, live.FormatBytes(f.BytesOpened), f.Fallbacks)
		if f.Out {
			v += ", taken out by a check"
		}
		row("  ", "frames "+f.Engine, v)
	}
	printClients(w, st.Clients, now)
	for _, ws := range st.Waiting {
		what := "of " + ws.Client + " waiting for its client"
		if ws.Server != "" {
			what = "with " + ws.Server + " waiting to resume"
		}
		fmt.Fprintf(w, "\nsession %s since %s: %d streams, %s kept to resend\n",
			what, stamp(ws.Since, now), ws.Streams, live.FormatBytes(uint64(ws.BytesKept)))
	}
	for _, l := range st.Links {
		fmt.Fprintf(w, "\nlink %d: %s\n", l.Link, l.Peer)
		if l.Client != "" {
			row("  ", "client", l.Client)
		}
		if l.Key != "" {
			row("  ", "key", l.Key)
		}
		row("  ", "up since", stamp(l.UpSince, now))
		row("  ", "latest handshake", ago(l.UpSince, now))
		row("  ", "latest rekey", "sent "+rekey(l.RekeysSent, l.LastRekeySent, now)+", received "+rekey(l.RekeysReceived, l.LastRekeyReceive, now))
		printTraffic(w, "  ", l.Traffic)
		if st.Role == "server" {
			row("  ", "streams", streamList(l.Streams))
		}
	}
}

// printClients lists a server's clients: each with its keys'
// fingerprints and whether it is connected, when it was last seen, or
// that it never was.
func printClients(w io.Writer, cs []live.ClientStatus, now time.Time) {
	if len(cs) == 0 {
		return
	}
	width := 0
	for _, c := range cs {
		width = max(width, len(c.Name))
	}
	fmt.Fprintln(w, "\nclients:")
	for _, c := range cs {
		state := "never seen"
		switch {
		case c.Links == 1:
			state = "connected (1 link)"
		case c.Links > 1:
			state = fmt.Sprintf("connected (%d links)", c.Links)
		case c.LastSeen != nil:
			state = "last seen " + stamp(*c.LastSeen, now)
		}
		fmt.Fprintf(w, "  %-*s  key %s  %s\n", width, c.Name, strings.Join(c.Keys, ", "), state)
	}
}

// until is how long after now t is: "in 1.2s", or "now".
func until(t, now time.Time) string {
	d := t.Sub(now).Round(100 * time.Millisecond)
	if d <= 0 {
		return "now"
	}
	return "in " + d.String()
}

func printTraffic(w io.Writer, indent string, t live.Traffic) {
	fmt.Fprintf(w, "%s%-18s %s received, %s sent\n", indent, "transfer:", live.FormatBytes(t.BytesReceived), live.FormatBytes(t.BytesSent))
	fmt.Fprintf(w, "%s%-18s %s received, %s sent\n", indent, "rate:", live.FormatRate(t.RateReceived), live.FormatRate(t.RateSent))
}

// streamList is "service ssh 2, socks 1", or "none".
func streamList(ss []live.Streams) string {
	if len(ss) == 0 {
		return "none"
	}
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = strings.TrimSpace(s.Kind+" "+s.Name) + fmt.Sprintf(" %d", s.Active)
	}
	return strings.Join(parts, ", ")
}

func rekey(n uint64, last *time.Time, now time.Time) string {
	if last == nil {
		return "never"
	}
	return fmt.Sprintf("%s (%d so far)", ago(*last, now), n)
}

// stamp is a time with how long ago it was: "2026-12-01 22:50:01 UTC (5m3s ago)".
func stamp(t, now time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05 MST") + " (" + ago(t, now) + ")"
}

// ago is how long before now t was, in whole seconds: "5m3s ago".
func ago(t, now time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d <= 0 {
		return "just now"
	}
	return d.String() + " ago"
}

// endStatus is the running end's Status with what only the command knows:
// the version, the engine spec and the server's listen address.
func endStatus(status func() *live.Status, c *config.Common, listen string) func() *live.Status {
	return func() *live.Status {
		st := status()
		st.Version, st.Policy, st.Listen = version(), c.Engine, listen
		return st
	}
}
