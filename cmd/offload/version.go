package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

func init() {
	register(&command{
		Name:  "version",
		Short: "print the version, Go version and platform",
		Flags: func(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
			return func(_ context.Context, env *runEnv, args []string) (int, error) {
				if len(args) != 0 {
					return 2, errUsage
				}
				fmt.Fprintf(env.Stdout, "offload %s %s %s/%s\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
				return 0, nil
			}
		},
	})
}

// version is the module version, or the VCS revision for a build from a
// checkout.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if (v == "" || v == "(devel)") && rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		return "devel-" + rev + dirty
	}
	return v
}
