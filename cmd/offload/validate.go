package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/selector"
	"github.com/offload-dev/offload/tunnel"
)

func init() {
	register(&command{
		Name:  "validate",
		Short: "check config files and their key files, as a start would",
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
				for _, f := range files {
					if !validateFile(ctx, env.Stdout, env.Stderr, f) {
						code = 1
					}
				}
				return code, nil
			}
		},
	})
}

// validateFile loads one config file and its key, printing "FILE: ok (...)"
// to stdout or every problem, one per line, to stderr. It reports whether
// the file is fine. It checks what a start checks before it uses the
// network, the engine included.
func validateFile(ctx context.Context, stdout, stderr io.Writer, path string) bool {
	cfg, err := config.Load(path)
	if err != nil {
		// An Errors value prints one "FILE:LINE: FIELD: problem" per line;
		// a read error names the file itself.
		fmt.Fprintln(stderr, err)
		return false
	}
	var common *config.Common
	var summary string
	switch c := cfg.(type) {
	case *config.Server:
		common = &c.Common
		summary = "server: " + plural(len(c.Services), "service") + dynamicSummary(
			len(c.SocksAllow), "socks rule", len(c.UDPServices), "UDP service", len(c.ReverseAllow), "reverse rule")
		// What a start builds before it listens: the rules, every
		// client's keys (all their errors at once), and the server itself
		// (tunnel.NewServer's checks: services, caps, PROXY protocol).
		key, err := loadKey(common)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return false
		}
		sc, err := serverConfig(c, configOptions(common, key, zap.NewNop()), key)
		if err == nil {
			_, err = tunnel.NewServer(sc)
		}
		if err != nil {
			printFileError(stderr, path, err)
			return false
		}
		if len(c.Clients) > 0 {
			summary += ", " + plural(len(c.Clients), "client")
		}
	case *config.Client:
		common = &c.Common
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
			return false
		}
	default:
		panic(fmt.Sprintf("config.Load returned %T", cfg))
	}
	key, err := loadKey(common)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return false
	}
	// The tunnel's own checks on the options a start would make: config's
	// are meant to be a superset, and this keeps them honest.
	if err := configOptions(common, key, zap.NewNop()).Check(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return false
	}
	if _, err := common.LoadMetricsToken(); err != nil {
		fmt.Fprintln(stderr, err)
		return false
	}
	// A named engine must serve the suite here, as a start requires
	// (engine: afalg:foo on a kernel without it). auto and hybrid use
	// whatever this machine has; they measure it at start, which
	// validate does not wait for.
	if !selector.IsPolicy(common.Engine) {
		if _, err := openEngines(ctx, common, zap.NewNop()); err != nil {
			fmt.Fprintln(stderr, err)
			return false
		}
	}
	// The streams a link carries (max_streams; link_buffer bounds their
	// bytes): say what it comes to.
	fmt.Fprintf(stdout, "%s: ok (%s, suite %v, engine %s, %s per link)\n", path, summary, common.Suite, common.Engine,
		plural(common.LinkStreams(), "stream"))
	return true
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
