package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/selector"
	"github.com/offload-dev/offload/tunnel"
)

func init() {
	register(&command{
		Name:  "validate",
		Short: "check config files and their key files, as a start would, and each client against the server",
		Usage: "[-c FILE] [FILE...]",
		Flags: func(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
			file := fs.String("c", "", "config `FILE` to check (more may follow as arguments)")
			return func(ctx context.Context, env *runEnv, args []string) (int, error) {
				var files []string
				if *file != "" {
					files = append(files, *file)
				}
				files = append(files, args...)
				if len(files) == 0 {
					return 2, errUsage
				}
				code := 0
				var ends []*validEnd
				for _, f := range files {
					end := validateFile(ctx, env.Stdout, env.Stderr, f)
					if end == nil {
						code = 1
						continue
					}
					ends = append(ends, end)
				}
				if !validatePairs(ctx, env.Stdout, env.Stderr, ends) {
					code = 1
				}
				return code, nil
			}
		},
	})
}

// validEnd is a config that validated, with its key, for the pair check.
type validEnd struct {
	path   string
	server *config.Server
	client *config.Client
	key    []byte
}

// validateFile loads one config file and its key, printing "FILE: ok (...)"
// to stdout or every problem, one per line, to stderr. It returns the
// config if it is fine, nil if not. It checks what a start checks before
// it uses the network, the engine included.
func validateFile(ctx context.Context, stdout, stderr io.Writer, path string) *validEnd {
	cfg, err := config.Load(path)
	if err != nil {
		// An Errors value prints one "FILE:LINE: FIELD: problem" per line;
		// a read error names the file itself.
		fmt.Fprintln(stderr, err)
		return nil
	}
	end := &validEnd{path: path}
	var common *config.Common
	var topt tunnel.Options // the config's tunnel options
	var summary string
	switch c := cfg.(type) {
	case *config.Server:
		common, end.server, topt = &c.Common, c, c.TunnelOptions()
		summary = "server: " + plural(len(c.Services), "service") + dynamicSummary(
			len(c.SocksAllow), "socks rule", len(c.UDPServices), "UDP service", len(c.ReverseAllow), "reverse rule")
		// What a start builds before it listens: the rules, every
		// client's keys (all their errors at once), and the server itself
		// (tunnel.NewServer's checks: services, caps, PROXY protocol).
		key, err := loadKey(common)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return nil
		}
		sc, err := serverConfig(c, configOptions(topt, key, zap.NewNop()), key)
		if err == nil {
			_, err = tunnel.NewServer(sc)
		}
		if err != nil {
			printFileError(stderr, path, err)
			return nil
		}
		if len(c.Clients) > 0 {
			summary += ", " + plural(len(c.Clients), "client")
		}
	case *config.Client:
		common, end.client, topt = &c.Common, c, c.TunnelOptions()
		socks := 0
		if c.Socks != "" {
			socks = 1
		}
		summary = "client: " + plural(len(c.Forwards), "forward") + dynamicSummary(
			socks, "socks listener", len(c.UDPForwards), "UDP forward", len(c.Reverse), "reverse forward")
		if len(c.Servers) > 1 {
			summary += ", " + plural(len(c.Servers), "server")
		}
		if _, err := c.LoadSocksUsers(); err != nil {
			fmt.Fprintln(stderr, err)
			return nil
		}
	default:
		panic(fmt.Sprintf("config.Load returned %T", cfg))
	}
	key, err := loadKey(common)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil
	}
	end.key = key
	// The tunnel's own checks on the options a start would make: config's
	// are meant to be a superset, and this keeps them honest.
	if err := configOptions(topt, key, zap.NewNop()).Check(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return nil
	}
	if _, err := common.LoadMetricsToken(); err != nil {
		fmt.Fprintln(stderr, err)
		return nil
	}
	// A named engine must serve the suite here, as a start requires
	// (engine: afalg:foo on a kernel without it). auto and hybrid use
	// whatever this machine has; they measure it at start, which
	// validate does not wait for.
	if !selector.IsPolicy(common.Engine) {
		if _, err := openEngines(ctx, common, zap.NewNop()); err != nil {
			fmt.Fprintln(stderr, err)
			return nil
		}
	}
	// The streams a link carries (max_streams; link_buffer bounds their
	// bytes): say what it comes to.
	fmt.Fprintf(stdout, "%s: ok (%s, suite %v, engine %s, %s per link)\n", path, summary, common.Suite, common.Engine,
		plural(common.LinkStreams(), "stream"))
	return end
}

// validatePairs checks every client config among ends against every
// server config (those whose listen address the client names, if it names
// any of them): what the server's handshake and grants would say of it
// (tunnel.ServerConfig.CheckPeer). "SERVER + CLIENT: ok (...)" goes to
// stdout, each mismatch to stderr; it reports whether all pairs are fine.
func validatePairs(ctx context.Context, stdout, stderr io.Writer, ends []*validEnd) bool {
	var servers, clients []*validEnd
	for _, e := range ends {
		if e.server != nil {
			servers = append(servers, e)
		} else {
			clients = append(clients, e)
		}
	}
	ok := true
	for _, c := range clients {
		for _, s := range pairServers(servers, c.client) {
			if !validatePair(ctx, stdout, stderr, s, c) {
				ok = false
			}
		}
	}
	return ok
}

// pairServers are the servers among servers that client dials (by listen
// address), or all of them if it dials none of them by that address (a
// name, a load balancer).
func pairServers(servers []*validEnd, client *config.Client) []*validEnd {
	var named []*validEnd
	for _, s := range servers {
		if slices.Contains(client.Servers, s.server.Listen) {
			named = append(named, s)
		}
	}
	if len(named) > 0 {
		return named
	}
	return servers
}

// validatePair prints the server's verdict on one client config.
func validatePair(ctx context.Context, stdout, stderr io.Writer, s, c *validEnd) bool {
	pair := s.path + " + " + c.path
	sc, err := serverConfig(s.server, configOptions(s.server.TunnelOptions(), s.key, zap.NewNop()), s.key)
	if err != nil {
		printFileError(stderr, s.path, err)
		return false
	}
	cc := c.client
	peer := tunnel.Peer{Suite: cc.Suite, PSK: c.key, Socks: cc.Socks != ""}
	for _, f := range cc.Forwards {
		peer.Services = append(peer.Services, f.Service)
	}
	for _, f := range cc.UDPForwards {
		peer.UDP = append(peer.UDP, f.Service)
	}
	for _, r := range cc.Reverse {
		ap, err := netip.ParseAddrPort(r.Listen)
		if err != nil { // config checked it: an IP literal and a port
			fmt.Fprintln(stderr, cc.FieldError("reverse", err))
			return false
		}
		peer.Reverse = append(peer.Reverse, ap)
	}
	v, err := sc.CheckPeer(ctx, peer)
	if err != nil {
		printFileError(stderr, s.path, err)
		return false
	}
	if v.Handshake != nil {
		fmt.Fprintf(stderr, "%s: %v (client key %s; the server's: %s)\n", pair, v.Handshake, v.Key, serverKeys(sc))
		return false
	}
	ok := true
	refused := func(field string, err error) {
		if err != nil {
			ok = false
			fmt.Fprintln(stderr, cc.FieldError(field, fmt.Errorf("the server refuses client %s: %w", v.Client, err)))
		}
	}
	for i, err := range v.Services {
		refused(forwardField(i)+".service", err)
	}
	for i, err := range v.UDP {
		refused("udp_forwards["+strconv.Itoa(i)+"].service", err)
	}
	for i, err := range v.Reverse {
		refused("reverse["+strconv.Itoa(i)+"].listen", err)
	}
	refused("socks", v.Socks)
	if ok {
		fmt.Fprintf(stdout, "%s: ok (client %s, key %s; %s granted)\n", pair, v.Client, v.Key, grantSummary(peer))
	}
	return ok
}

// serverKeys lists a server config's clients with their keys'
// fingerprints: "alice 3f9a0c1b7e2d4a65, bob 0c1b...".
func serverKeys(sc tunnel.ServerConfig) string {
	if len(sc.Clients) == 0 {
		return config.KeyFingerprint(sc.PSK)
	}
	var out []string
	for _, c := range sc.Clients {
		for _, k := range c.Keys {
			out = append(out, c.Name+" "+config.KeyFingerprint(k))
		}
	}
	return strings.Join(out, ", ")
}

// grantSummary says what the pair check granted: "2 forwards, socks".
func grantSummary(p tunnel.Peer) string {
	var parts []string
	if n := len(p.Services); n > 0 {
		parts = append(parts, plural(n, "forward"))
	}
	if p.Socks {
		parts = append(parts, "socks")
	}
	if n := len(p.UDP); n > 0 {
		parts = append(parts, plural(n, "UDP forward"))
	}
	if n := len(p.Reverse); n > 0 {
		parts = append(parts, plural(n, "reverse forward"))
	}
	if len(parts) == 0 {
		return "nothing asked"
	}
	return strings.Join(parts, ", ")
}

// printFileError prints err: a config error names its file and line
// already; any other is prefixed with the file.
func printFileError(w io.Writer, path string, err error) {
	var ce *config.Error
	var ces config.Errors
	if errors.As(err, &ce) || errors.As(err, &ces) {
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintf(w, "%s: %v\n", path, err)
}

func plural(n int, what string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// dynamicSummary lists the counts of SOCKS, UDP and reverse settings that
// are not zero, as ", 1 socks listener, 2 UDP forwards".
func dynamicSummary(pairs ...any) string {
	var out string
	for i := 0; i+1 < len(pairs); i += 2 {
		if n := pairs[i].(int); n > 0 {
			out += ", " + plural(n, pairs[i+1].(string))
		}
	}
	return out
}
