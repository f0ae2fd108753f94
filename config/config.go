// Package config reads offload's YAML config files into validated structs.
//
// There are two shapes, one file per end of a tunnel: a Server (listen,
// services) and a Client (server, forwards); they share key_file, suite,
// engine and the tunables in Common. See examples/server.yaml and
// examples/client.yaml.
//
// Every problem is reported with the file, line and field path, and all of
// them are reported at once, as an Errors value:
//
//	server.yaml:7: services.web: target "localhost" has no port (want host:port)
//	server.yaml:9: max_frame: 2MiB is more than the hard cap of 1048576 bytes
package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/offload-dev/offload/config/yamlite"
	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Defaults and limits that are config's own: the runtime's settings, the
// server's caps against typos, the file's size. Every tunnel setting's
// default is tunnel.DefaultOptions()'s and its rule tunnel.Options.Check
// (docs/settings.md): a file starts from those defaults, so a setting
// left out is the default and a 0 is off, and Check's problems are
// reported at the setting's line.
const (
	// DefaultMemoryLimit is the Go runtime's soft memory limit (what
	// GOMEMLIMIT sets): with it the garbage collector works harder as the
	// heap nears the limit, which keeps an end with 100 busy streams under
	// the 24 MiB a router can spare (docs/budgets.md). 0 means no limit;
	// GOMEMLIMIT in the environment wins over the config.
	DefaultMemoryLimit = 20 << 20
	MinMemoryLimit     = 4 << 20

	// MaxMaxProcs caps max_procs, the Go runtime's GOMAXPROCS: how many
	// CPUs run the end's Go code at once. 0 (the default) leaves the
	// runtime's own choice (every CPU the process may use); GOMAXPROCS in
	// the environment wins over the config. One is cheaper per byte where
	// the ends share a few cores with other work: a hand-off between the
	// data path's goroutines then never wakes a second thread
	// (docs/performance.md, "max_procs").
	MaxMaxProcs = 1024

	// Server caps against floods and replays (docs/defences.md); their
	// defaults are tunnel's (tunnel.DefaultMaxLinks, ...).
	MaxMaxLinks      = 1024
	MaxMaxHandshakes = 4096

	// DefaultEngine is the engine a file that names none gets. The
	// specs a config accepts are the selector's (CheckEngine).
	DefaultEngine = engine.SoftwareName

	// MaxFileSize bounds a config file; real ones are a few KiB.
	MaxFileSize = 256 << 10
)

// Log formats.
const (
	LogConsole = "console"
	LogJSON    = "json"
)

// Log configures logging.
type Log struct {
	Level  zapcore.Level // debug, info (default), warn or error
	Format string        // LogConsole (default) or LogJSON
}

// Common is what server and client configs share. Its tunnel settings
// (MaxFrame to DrainTimeout, Verify, EngineCheckInterval) are
// tunnel.Options' fields of the same names, with the same meanings (0 is
// off), and go there whole by TunnelOptions.
type Common struct {
	// File is the config file's name as given to Load (or Parse).
	File string
	// KeyFile is the pre-shared key file; a relative path in the file is
	// made relative to the config file's directory. Read it with LoadKey.
	KeyFile string
	// Suite is the cipher suite; both ends must use the same one.
	Suite suite.Suite
	// Engine is an engine spec (selector.Specs: the engine registry's
	// specs, auto and hybrid; default EngineSoftware). Only its syntax is
	// checked here, by selector.CheckSpec, as the tunnel checks it.
	Engine string
	// MaxFrame is record.Options.MaxFrame: the largest ciphertext of a
	// frame, both ways (record.CheckMaxFrame).
	MaxFrame int
	// YamuxWindow is yamux's MaxStreamWindowSize in bytes.
	YamuxWindow int
	// Keepalive is yamux's KeepAliveInterval; 0 disables keepalives.
	Keepalive time.Duration
	// ResumeWindow is tunnel.Options.ResumeWindow; 0 is off.
	ResumeWindow time.Duration
	// DialTimeout bounds a TCP dial: to a target on the server, to the
	// server on the client.
	DialTimeout time.Duration
	// HandshakeTimeout bounds the tunnel handshake.
	HandshakeTimeout time.Duration
	// RekeyInterval is how long this end sends under one epoch's keys at
	// most before it moves to the next.
	RekeyInterval time.Duration
	// MaxStreams caps concurrent streams on one link.
	MaxStreams int
	// LinkBuffer is the budget of one link's stream receive buffers in
	// bytes: it bounds what they hold, not how many streams there are
	// (MaxStreams does); a stream whose data would overrun it is reset.
	LinkBuffer int
	// DrainTimeout is how long SIGTERM waits for open streams to finish;
	// 0 closes them at once.
	DrainTimeout time.Duration
	Log          Log
	// Metrics is a listen address for Prometheus text metrics; empty
	// means none. A port alone (":9100") means loopback (127.0.0.1); an
	// address beyond loopback is refused unless MetricsTokenFile is set.
	Metrics string
	// MetricsTokenFile is a file holding the bearer token /metrics
	// requires; empty means none. Relative paths are relative to the
	// config file; read it with LoadMetricsToken.
	MetricsTokenFile string
	// Control is the end's control socket (tunnel/control), which
	// offload status asks: the control setting, relative paths relative
	// to the config file, or by default control.DefaultPath of the
	// config's ControlName; "" when the setting is off.
	Control string
	// MemoryLimit is the runtime's soft memory limit in bytes; 0 means
	// none.
	MemoryLimit int
	// MaxProcs is the runtime's GOMAXPROCS; 0 means the runtime's own
	// choice.
	MaxProcs int
	// Verify re-checks one in Verify frames an engine other than
	// software sealed or opened against software; 0 (default) is off.
	Verify int
	// EngineCheckInterval is how often every engine runs its known-answer
	// test after the one at start; 0 means only at start.
	EngineCheckInterval time.Duration
	// Profile is the selector's calibration profile for engine auto and
	// hybrid; a relative path is relative to the config file. Empty means
	// the selector's default path.
	Profile string

	// fields maps field paths to where they are in File, for FieldError.
	fields map[string]at
}

// Server is the config of "offload server".
type Server struct {
	Common
	// Listen is the host:port the tunnel listens on (host may be empty for
	// all interfaces).
	Listen string
	// Services maps a service name (what clients ask for) to the host:port
	// the server dials for it. Nothing else is ever dialled.
	Services map[string]string
	// MaxLinks caps the links up at once; a client with no link beyond it
	// is refused (busy) and redials. 0 (not in the file): the tunnel's
	// default, DefaultMaxLinks or MaxLinksPerClient per client if more
	// (tunnel.LinkCaps).
	MaxLinks int
	// MaxLinksPerClient caps one client's links: a new one beyond it
	// replaces the client's oldest.
	MaxLinksPerClient int
	// MaxHandshakes caps unauthenticated connections in their handshake,
	// MaxHandshakesPerSource those from one IPv4 address or IPv6 /64.
	MaxHandshakes          int
	MaxHandshakesPerSource int
	// Clients are the clients the server accepts, each with its own keys
	// and services (clients.go); empty when the top-level KeyFile is the
	// one key, which may use every service.
	Clients []ServerClient

	clientsSet bool // clients was in the file

	// ServerRules: socks_allow, udp_services, reverse_allow (socks.go).
	ServerRules

	// ProxyProtocol makes the listener read a PROXY protocol v2 header
	// from each connection, which comes only from ProxyProtocolFrom (the
	// load balancers; servers.go).
	ProxyProtocol     bool
	ProxyProtocolFrom []netip.Prefix
}

// Forward is one client listener: connections to Listen go through the
// tunnel to the server's service Service.
type Forward struct {
	Listen  string // host:port (host may be empty for all interfaces)
	Service string // a service name on the server
}

// Redial is the client's reconnect backoff: from Min, doubling (with
// jitter) up to Max.
type Redial struct {
	Min, Max time.Duration
}

// Client is the config of "offload client".
type Client struct {
	Common
	// Servers are the offload servers' host:port, tried in turn (the
	// file's server: X or servers: [X, Y]; servers.go).
	Servers  []string
	Forwards []Forward
	Redial   Redial
	// LinkWait is tunnel.Options.LinkWait: how long a local connection
	// that finds no link waits for a dial under way (or due) before it is
	// reset; one that finds the last dial failed and the next further off
	// is reset at once, as is every one when LinkWait is 0.
	LinkWait time.Duration
	// ClientDynamic: socks, udp_forwards, reverse (socks.go).
	ClientDynamic

	// listenAddrs are the forwards' listen addresses, for socks's check.
	listenAddrs []listenAddr
}

// FieldError returns err as an *Error at field's place in the config file,
// e.g. c.FieldError("engine", err) when the configured engine can't be
// opened. field is a path as in Error.Field; a field the file does not set
// is blamed on line 1.
func (c *Common) FieldError(field string, err error) error {
	a, ok := c.fields[field]
	if !ok {
		a = at{1, 0}
	}
	return &Error{File: c.File, Line: a.line, Col: a.col, Field: field, Msg: err.Error(), Err: err}
}

// LoadKey reads c.KeyFile with the package-level LoadKey; an error is an
// *Error at the key_file field, wrapping the cause (ErrKeyPermissions,
// ErrKeyLength, fs.ErrNotExist, ...).
func (c *Common) LoadKey() ([]byte, error) {
	key, err := LoadKey(c.KeyFile)
	if err != nil {
		return nil, c.FieldError("key_file", err)
	}
	return key, nil
}

// LoadMetricsToken reads c.MetricsTokenFile with LoadToken; nil if there
// is none. An error is an *Error at the metrics_token_file field.
func (c *Common) LoadMetricsToken() ([]byte, error) {
	if c.MetricsTokenFile == "" {
		return nil, nil
	}
	tok, err := LoadToken(c.MetricsTokenFile)
	if err != nil {
		return nil, c.FieldError("metrics_token_file", err)
	}
	return tok, nil
}

// defaultCommon is what a file starts from: the tunnel's defaults and
// config's own.
func defaultCommon(file string) Common {
	c := Common{
		File:        file,
		Control:     defaultControl(file),
		Engine:      DefaultEngine,
		MemoryLimit: DefaultMemoryLimit,
		Log:         Log{Level: zapcore.InfoLevel, Format: LogConsole},
		fields:      map[string]at{},
	}
	o := tunnel.DefaultOptions()
	for _, s := range c.tunnelSettings(&o) {
		s(false)
	}
	return c
}

// TunnelOptions is the tunnel's options as the file sets them, from
// tunnel.DefaultOptions: the same name means the same setting, and a 0
// is off. The caller adds the key, the engines and a logger.
func (c *Common) TunnelOptions() tunnel.Options {
	o := tunnel.DefaultOptions()
	for _, s := range c.tunnelSettings(&o) {
		s(true)
	}
	return o
}

// tunnelSettings pairs c's tunnel settings with o's fields of the same
// names: the one list by which a file starts from the tunnel's defaults
// (defaultCommon) and its settings go to the tunnel (TunnelOptions). Each
// func copies its pair, to o if toTunnel, else to c.
func (c *Common) tunnelSettings(o *tunnel.Options) []func(toTunnel bool) {
	return []func(bool){
		same(&c.Suite, &o.Suite),
		same(&c.MaxFrame, &o.MaxFrame),
		same(&c.YamuxWindow, &o.YamuxWindow),
		same(&c.LinkBuffer, &o.LinkBuffer),
		same(&c.MaxStreams, &o.MaxStreams),
		same(&c.Keepalive, &o.Keepalive),
		same(&c.ResumeWindow, &o.ResumeWindow),
		same(&c.RekeyInterval, &o.RekeyInterval),
		same(&c.DialTimeout, &o.DialTimeout),
		same(&c.HandshakeTimeout, &o.HandshakeTimeout),
		same(&c.DrainTimeout, &o.DrainTimeout),
		same(&c.EngineCheckInterval, &o.EngineCheckInterval),
		same(&c.Verify, &o.Verify),
	}
}

// same is a tunnelSettings pair: config's field and the tunnel's.
func same[T any](conf, tun *T) func(toTunnel bool) {
	return func(toTunnel bool) {
		if toTunnel {
			*tun = *conf
		} else {
			*conf = *tun
		}
	}
}

// TunnelOptions is Common's with the client's link_wait.
func (c *Client) TunnelOptions() tunnel.Options {
	o := c.Common.TunnelOptions()
	o.LinkWait = c.LinkWait
	return o
}

// readFile reads a config file, bounded by MaxFileSize.
func readFile(path string) ([]byte, error) {
	f, _, err := openRegular(path, "config")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return data, nil
}

// LoadServer reads and validates a server config file. A problem in the
// file comes back as Errors; failing to read it as a wrapped OS error.
func LoadServer(path string) (*Server, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return ParseServer(path, data)
}

// LoadClient reads and validates a client config file, as LoadServer.
func LoadClient(path string) (*Client, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return ParseClient(path, data)
}

// Load reads a server or client config, telling them apart by their
// top-level fields: services or listen make a server, server or forwards a
// client. It returns *Server or *Client.
func Load(path string) (any, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// ParseServer is LoadServer on data already read; name is the file name
// for messages and the base of a relative key_file.
func ParseServer(name string, data []byte) (*Server, error) {
	return parseAs(name, data, (*decoder).server)
}

// ParseClient is LoadClient on data already read, as ParseServer.
func ParseClient(name string, data []byte) (*Client, error) {
	return parseAs(name, data, (*decoder).client)
}

// parseAs parses data and decodes its top-level mapping with decode,
// returning every error the two found.
func parseAs[T any](name string, data []byte, decode func(*decoder, *yamlite.Node) *T) (*T, error) {
	d := &decoder{file: name}
	body := d.parse(data)
	if body == nil {
		return nil, d.result()
	}
	v := decode(d, body)
	if err := d.result(); err != nil {
		return nil, err
	}
	return v, nil
}

// Parse is Load on data already read, as ParseServer.
func Parse(name string, data []byte) (any, error) {
	d := &decoder{file: name}
	body := d.parse(data)
	if body == nil {
		return nil, d.result()
	}
	top := value{node: body, at: atNode(body, at{1, 0})}
	// Look at the keys with a scratch decoder: server or client decodes
	// the mapping again and reports its errors once.
	scan := &decoder{file: name}
	entries, ok := scan.mapping(top)
	if !ok {
		return nil, scan.result()
	}
	var server, client []string
	for _, e := range entries {
		switch e.key {
		case "services", "listen":
			server = append(server, e.key)
		case "server", "servers", "forwards":
			client = append(client, e.key)
		}
	}
	switch {
	case len(server) > 0 && len(client) == 0:
		s := d.server(body)
		if err := d.result(); err != nil {
			return nil, err
		}
		return s, nil
	case len(client) > 0 && len(server) == 0:
		c := d.client(body)
		if err := d.result(); err != nil {
			return nil, err
		}
		return c, nil
	case len(server) > 0:
		d.add(top.at, "", &sentinelError{fmt.Sprintf("has both server fields (%v) and client fields (%v); use one file per end", server, client), ErrUnknownKind})
	default:
		d.add(top.at, "", &sentinelError{"not a server config (no services) nor a client config (no server, forwards)", ErrUnknownKind})
	}
	return nil, d.result()
}

// str decodes a string field.
func (d *decoder) str(v value, dst *string, check func(string) error) {
	s, ok := d.scalar(v)
	if !ok {
		return
	}
	if check != nil {
		if err := check(s); err != nil {
			d.add(v.at, v.field, err)
			return
		}
	}
	*dst = s
}

func (d *decoder) size(v value, dst *int, lo, hi int) {
	s, ok := d.scalar(v)
	if !ok {
		return
	}
	n, err := ParseSize(s)
	switch {
	case err != nil:
		d.add(v.at, v.field, err)
	case n < lo:
		d.errorf(v.at, v.field, "%s is less than the minimum of %d bytes", s, lo)
	case n > hi:
		d.errorf(v.at, v.field, "%s is more than the maximum of %d bytes", s, hi)
	default:
		*dst = n
	}
}

// count decodes a number from 1 to hi.
func (d *decoder) count(v value, dst *int, hi int) {
	s, ok := d.scalar(v)
	if !ok {
		return
	}
	n, err := ParseSize(s)
	if err != nil || n < 1 || n > hi {
		d.errorf(v.at, v.field, "%q: want a number from 1 to %d", s, hi)
		return
	}
	*dst = n
}

// upTo sets dst to v, a whole number from 0 to hi; otherwise it reports
// the value quoted, then want (a format with hi's %d).
func (d *decoder) upTo(v value, dst *int, hi int, want string) {
	s, ok := d.scalar(v)
	if !ok {
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 || n > hi {
		d.errorf(v.at, v.field, "%q: "+want, s, hi)
		return
	}
	*dst = n
}

// checkOptions runs the tunnel's rules (tunnel.Options.Check) on what
// the file says, each problem at its setting's line, or at the line of
// another setting its rule weighs when the file left this one out.
func (d *decoder) checkOptions(c *Common, o tunnel.Options) {
	err := o.Check()
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, err := range errs {
		var se *tunnel.SettingError
		if !errors.As(err, &se) {
			d.add(at{1, 0}, "", err)
			continue
		}
		field := se.Setting
		a, ok := c.fields[field]
		for _, other := range se.Others {
			if !ok {
				a, ok = c.fields[other]
				field = other
			}
		}
		if !ok {
			field = se.Setting
		}
		d.add(a, field, se.Err)
	}
}

// LinkStreams is how many streams one link carries at once with these
// settings: max_streams. link_buffer bounds their bytes, not their number
// (docs/defences.md).
func (c *Common) LinkStreams() int {
	return c.MaxStreams
}

func (d *decoder) duration(v value, dst *time.Duration, positive bool) {
	s, ok := d.scalar(v)
	if !ok {
		return
	}
	t, err := ParseDuration(s)
	switch {
	case err != nil:
		d.add(v.at, v.field, err)
	case positive && t == 0:
		d.errorf(v.at, v.field, "must be more than 0")
	default:
		*dst = t
	}
}

// common returns the specs of the fields Server and Client share.
func (d *decoder) common(c *Common) []fieldSpec {
	track := func(name string, fn func(v value)) fieldSpec {
		return fieldSpec{name: name, decode: func(v value) {
			c.fields[v.field] = v.at
			fn(v)
		}}
	}
	return []fieldSpec{
		// Required, but a server may have clients instead: server and
		// client check (finishClients, client).
		{name: "key_file", decode: func(v value) {
			c.fields[v.field] = v.at
			c.KeyFile = d.path(v, c.File)
		}},
		track("suite", func(v value) {
			var name string
			d.str(v, &name, nil)
			if name == "" {
				return
			}
			s, err := suite.Parse(name)
			if err != nil {
				var known []string
				for _, s := range suite.All() {
					known = append(known, s.String())
				}
				d.add(v.at, v.field, withSuggestion(err, fmt.Sprintf("unknown suite %q", name), name, known))
				return
			}
			c.Suite = s
		}),
		track("engine", func(v value) { d.str(v, &c.Engine, checkEngineSuggest) }),
		track("verify", func(v value) {
			d.upTo(v, &c.Verify, tunnel.MaxVerify, "want 0 (off) or N from 1 to %d, to re-check one in N engine frames")
		}),
		track("engine_check_interval", func(v value) { d.duration(v, &c.EngineCheckInterval, false) }),
		track("memory_limit", func(v value) {
			s, ok := d.scalar(v)
			if !ok {
				return
			}
			n, err := ParseSize(s)
			switch {
			case err != nil:
				d.add(v.at, v.field, err)
			case n != 0 && n < MinMemoryLimit:
				d.errorf(v.at, v.field, "%s is less than the minimum of %d bytes (0 means no limit)", s, MinMemoryLimit)
			default:
				c.MemoryLimit = n
			}
		}),
		track("max_procs", func(v value) {
			d.upTo(v, &c.MaxProcs, MaxMaxProcs, "want 0 (the runtime's choice: every CPU) or a number of CPUs from 1 to %d")
		}),
		track("profile", func(v value) {
			d.str(v, &c.Profile, func(s string) error {
				if s == "" {
					return errors.New("is empty (leave it out for the default path)")
				}
				return nil
			})
			if c.Profile != "" && !filepath.IsAbs(c.Profile) {
				c.Profile = filepath.Join(filepath.Dir(c.File), c.Profile)
			}
		}),
		// A size or count out of the tunnel's range is refused as it is
		// read, quoting the file's spelling (2MiB); Check has the rest.
		track("max_frame", func(v value) { d.size(v, &c.MaxFrame, record.MinMaxFrame, record.HardMaxFrame) }),
		track("yamux_window", func(v value) { d.size(v, &c.YamuxWindow, tunnel.MinYamuxWindow, tunnel.MaxYamuxWindow) }),
		track("keepalive", func(v value) { d.duration(v, &c.Keepalive, false) }),
		track("resume_window", func(v value) { d.duration(v, &c.ResumeWindow, false) }),
		track("dial_timeout", func(v value) { d.duration(v, &c.DialTimeout, true) }),
		track("handshake_timeout", func(v value) { d.duration(v, &c.HandshakeTimeout, true) }),
		track("drain_timeout", func(v value) { d.duration(v, &c.DrainTimeout, false) }),
		track("rekey_interval", func(v value) { d.duration(v, &c.RekeyInterval, true) }),
		track("max_streams", func(v value) { d.count(v, &c.MaxStreams, tunnel.MaxMaxStreams) }),
		track("link_buffer", func(v value) {
			d.size(v, &c.LinkBuffer, tunnel.LinkBufferFor(1, tunnel.MinYamuxWindow), tunnel.MaxLinkBuffer)
		}),
		track("log", func(v value) {
			d.object(v, []fieldSpec{
				track("level", func(v value) {
					var s string
					d.str(v, &s, func(s string) error {
						switch s {
						case "debug", "info", "warn", "error":
							return nil
						}
						err := fmt.Errorf("unknown level %q (want debug, info, warn or error)", s)
						return withSuggestion(err, fmt.Sprintf("unknown level %q", s), s, []string{"debug", "info", "warn", "error"})
					})
					if s != "" {
						// Checked above; UnmarshalText accepts all four.
						_ = c.Log.Level.UnmarshalText([]byte(s))
					}
				}),
				track("format", func(v value) {
					d.str(v, &c.Log.Format, func(s string) error {
						if s != LogConsole && s != LogJSON {
							err := fmt.Errorf("unknown format %q (want console or json)", s)
							return withSuggestion(err, fmt.Sprintf("unknown format %q", s), s, []string{LogConsole, LogJSON})
						}
						return nil
					})
				}),
			})
		}),
		track("metrics", func(v value) {
			d.str(v, &c.Metrics, func(s string) error {
				if s == "" {
					return nil
				}
				return checkHostPort(s, addrListen, "address")
			})
		}),
		track("control", func(v value) {
			d.str(v, &c.Control, func(s string) error {
				if s == "" {
					return errors.New("is empty (leave it out for the default socket, or say off)")
				}
				return nil
			})
			switch {
			case c.Control == ControlOff:
				c.Control = ""
			case c.Control != "" && !filepath.IsAbs(c.Control):
				c.Control = filepath.Join(filepath.Dir(c.File), c.Control)
			}
		}),
		track("metrics_token_file", func(v value) {
			d.str(v, &c.MetricsTokenFile, func(s string) error {
				if s == "" {
					return errors.New("is empty (leave it out for no token)")
				}
				return nil
			})
			if c.MetricsTokenFile != "" && !filepath.IsAbs(c.MetricsTokenFile) {
				c.MetricsTokenFile = filepath.Join(filepath.Dir(c.File), c.MetricsTokenFile)
			}
		}),
	}
}

// finishCommon checks what depends on more than one common field, once
// they are all decoded.
func (d *decoder) finishCommon(c *Common) {
	if c.MetricsTokenFile != "" && c.Metrics == "" {
		d.errorf(c.fields["metrics_token_file"], "metrics_token_file", "is set but metrics is not")
	}
	if c.Metrics == "" {
		return
	}
	host, port, _ := net.SplitHostPort(c.Metrics) // checked when decoded
	if host == "" || isLocalhost(host) {
		// Loopback unless told otherwise: metrics are for this host.
		// localhost is not looked up: a hosts file that names another
		// address would have validate pass what the start refuses.
		c.Metrics = net.JoinHostPort("127.0.0.1", port)
		return
	}
	if !isLoopbackHost(host) && c.MetricsTokenFile == "" {
		d.errorf(c.fields["metrics"], "metrics", "%s is not a loopback address; serving metrics beyond this host needs metrics_token_file (a bearer token)", c.Metrics)
	}
}

// isLocalhost reports whether host is the name localhost (any case, with
// or without the root's dot).
func isLocalhost(host string) bool {
	return strings.EqualFold(strings.TrimSuffix(host, "."), "localhost")
}

// isLoopbackHost reports whether host is "localhost" or a loopback IP
// address.
func isLoopbackHost(host string) bool {
	if isLocalhost(host) {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

func (d *decoder) server(body *yamlite.Node) *Server {
	s := &Server{Common: defaultCommon(d.file), Services: map[string]string{},
		MaxLinksPerClient: tunnel.DefaultMaxLinksPerClient, MaxHandshakes: tunnel.DefaultMaxHandshakes, MaxHandshakesPerSource: tunnel.DefaultMaxHandshakesPerSource}
	top := value{node: body, at: atNode(body, at{1, 0})}
	specs := append(d.common(&s.Common),
		fieldSpec{name: "listen", required: true, decode: func(v value) {
			s.fields[v.field] = v.at
			d.str(v, &s.Listen, func(a string) error { return checkHostPort(a, addrListen, "address") })
		}},
		fieldSpec{name: "services", decode: func(v value) {
			s.fields[v.field] = v.at
			entries, ok := d.mapping(v)
			if !ok {
				return
			}
			if len(entries) == 0 {
				d.errorf(v.at, v.field, "no services; list at least one as NAME: host:port")
			}
			d.targets(s, entries, s.Services)
		}},
		fieldSpec{name: "max_links", decode: func(v value) { s.fields[v.field] = v.at; d.count(v, &s.MaxLinks, MaxMaxLinks) }},
		fieldSpec{name: "max_links_per_client", decode: func(v value) {
			s.fields[v.field] = v.at
			d.count(v, &s.MaxLinksPerClient, MaxMaxLinks)
		}},
		fieldSpec{name: "max_handshakes", decode: func(v value) { s.fields[v.field] = v.at; d.count(v, &s.MaxHandshakes, MaxMaxHandshakes) }},
		fieldSpec{name: "max_handshakes_per_source", decode: func(v value) {
			s.fields[v.field] = v.at
			d.count(v, &s.MaxHandshakesPerSource, MaxMaxHandshakes)
		}},
		d.clientsSpec(s),
	)
	proxySpecs, finishProxy := d.proxySpecs(s)
	specs = append(specs, proxySpecs...)
	d.object(top, append(specs, d.serverRuleSpecs(s)...))
	finishProxy()
	d.finishCommon(&s.Common)
	d.finishClients(s, top)
	d.finishServerRules(s)
	if s.Metrics != "" && s.Metrics == s.Listen {
		d.errorf(s.fields["metrics"], "metrics", "same address as listen")
	}
	if s.MaxLinks > 0 && s.MaxLinksPerClient > s.MaxLinks {
		a, ok := s.fields["max_links_per_client"]
		if !ok {
			a = s.fields["max_links"]
		}
		d.errorf(a, "max_links_per_client", "%d is more than max_links %d", s.MaxLinksPerClient, s.MaxLinks)
	}
	if s.MaxHandshakesPerSource > s.MaxHandshakes {
		a, ok := s.fields["max_handshakes_per_source"]
		if !ok {
			a = s.fields["max_handshakes"]
		}
		d.errorf(a, "max_handshakes_per_source", "%d is more than max_handshakes %d", s.MaxHandshakesPerSource, s.MaxHandshakes)
	}
	d.checkOptions(&s.Common, s.TunnelOptions())
	return s
}

func (d *decoder) client(body *yamlite.Node) *Client {
	c := &Client{Common: defaultCommon(d.file), Redial: Redial{Min: tunnel.DefaultRedialMin, Max: tunnel.DefaultRedialMax},
		LinkWait: tunnel.DefaultOptions().LinkWait}
	top := value{node: body, at: atNode(body, at{1, 0})}
	specs := append(append(d.common(&c.Common), d.serversSpecs(c)...),
		fieldSpec{name: "forwards", decode: func(v value) { d.forwards(c, v) }},
		fieldSpec{name: "link_wait", decode: func(v value) {
			c.fields[v.field] = v.at
			d.duration(v, &c.LinkWait, false)
		}},
		fieldSpec{name: "redial", decode: func(v value) {
			c.fields[v.field] = v.at
			var minAt at
			d.object(v, []fieldSpec{
				{name: "min", decode: func(v value) { minAt = v.at; d.duration(v, &c.Redial.Min, true) }},
				{name: "max", decode: func(v value) { d.duration(v, &c.Redial.Max, true) }},
			})
			if c.Redial.Max < c.Redial.Min {
				if minAt.line == 0 {
					minAt = v.at
				}
				d.errorf(minAt, join(v.field, "min"), "%v is more than redial.max %v", c.Redial.Min, c.Redial.Max)
			}
		}},
	)
	d.object(top, append(specs, d.clientDynamicSpecs(c)...))
	d.finishServers(c, top)
	if _, ok := c.fields["key_file"]; !ok && isMapping(top) {
		d.errorf(top.at, "key_file", "missing (required)")
	}
	d.finishCommon(&c.Common)
	d.finishClientDynamic(c, c.listenAddrs)
	d.checkOptions(&c.Common, c.TunnelOptions())
	return c
}

func (d *decoder) forwards(c *Client, v value) {
	c.fields[v.field] = v.at
	items, ok := d.sequence(v)
	if !ok {
		return
	}
	if len(items) == 0 {
		d.errorf(v.at, v.field, "no forwards; list at least one {listen: host:port, service: NAME}")
	}
	var prev []listenAddr
	for _, item := range items {
		var f Forward
		var listenAt at
		d.object(item, []fieldSpec{
			{name: "listen", required: true, decode: func(v value) {
				listenAt = v.at
				d.str(v, &f.Listen, func(a string) error { return checkHostPort(a, addrListen, "address") })
			}},
			{name: "service", required: true, decode: func(v value) {
				c.fields[v.field] = v.at // offload validate's pair check names it
				d.str(v, &f.Service, CheckServiceName)
			}},
		})
		c.fields[item.field] = item.at
		if f.Listen == "" || f.Service == "" {
			continue
		}
		d.claimListen(&prev, f.Listen, item.field+".listen", listenAt)
		c.Forwards = append(c.Forwards, f)
	}
	c.listenAddrs = prev
}

// listenAddr is a forward's listen address, normalized to find two forwards
// that could not both bind.
type listenAddr struct {
	host, port string // host "" is a wildcard
	field      string
	line       int
}

// parseListenAddr normalizes an address checkHostPort accepted.
func parseListenAddr(s, field string, line int) listenAddr {
	host, port, _ := net.SplitHostPort(s)
	if a, err := netip.ParseAddr(host); err == nil {
		if a.IsUnspecified() {
			host = ""
		} else {
			host = a.Unmap().String()
		}
	}
	return listenAddr{host: strings.ToLower(host), port: port, field: field, line: line}
}

// conflicts reports whether a and b can't both be bound: the same port,
// and the same host or either one all interfaces.
func (a listenAddr) conflicts(b listenAddr) bool {
	return a.port == b.port && (a.host == b.host || a.host == "" || b.host == "")
}
