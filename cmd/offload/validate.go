package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/tunnel"
)

func init() {
	register(&command{
		Name:  "validate",
		Short: "check config files and their key files, as a start would",
		Usage: "[-c FILE] [FILE...]",
		Flags: func(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
			file := fs.String("c", "", "config `FILE` to check (more may follow as arguments)")
			return func(_ context.Context, env *runEnv, args []string) (int, error) {
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
					if !validateFile(env.Stdout, env.Stderr, f) {
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
// the file is fine.
func validateFile(stdout, stderr io.Writer, path string) bool {
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
		if len(c.Clients) > 0 {
			// Every client's keys, as a start would read them, and the
			// tunnel's checks on them (tunnel.ServerConfig.Check).
			key, err := loadKey(common)
			if err == nil {
				var sc tunnel.ServerConfig
				if sc, err = serverConfig(c, configOptions(common, key, zap.NewNop()), key); err == nil {
					err = sc.Check()
				}
			}
			if err != nil {
				fmt.Fprintln(stderr, err)
				return false
			}
			summary += ", " + plural(len(c.Clients), "client")
		} else if _, err := tunnel.NewRules(c.SocksAllow, c.UDPServices, c.ReverseAllow); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", path, err)
			return false
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
	// The streams a link carries (max_streams; link_buffer bounds their
	// bytes): say what it comes to.
	fmt.Fprintf(stdout, "%s: ok (%s, suite %v, engine %s, %s per link)\n", path, summary, common.Suite, common.Engine,
		plural(common.LinkStreams(), "stream"))
	return true
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
