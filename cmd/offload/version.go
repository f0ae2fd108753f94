package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

func init() {
	register(&command{
		Name:  "version",
		Short: "print the version, the VCS revision it was built from, Go version and platform",
		Flags: func(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
			return func(_ context.Context, env *runEnv, args []string) (int, error) {
				if len(args) != 0 {
					return 2, errUsage
				}
				bi, _ := debug.ReadBuildInfo()
				printVersion(env.Stdout, bi)
				return 0, nil
			}
		},
	})
}

// buildVCS is what the go command stamps into a binary built in a
// checkout (go build -buildvcs, the default there): the revision, its
// commit time and whether the work tree had changes.
type buildVCS struct {
	revision, time string
	modified       bool
}

func vcsOf(bi *debug.BuildInfo) (v buildVCS, ok bool) {
	if bi == nil {
		return v, false
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.revision, ok = s.Value, true
		case "vcs.time":
			v.time = s.Value
		case "vcs.modified":
			v.modified = s.Value == "true"
		}
	}
	return v, ok
}

// printVersion writes the version line and, on a second line, the
// revision, its time and the modified flag, or why there are none: a bug
// report then says exactly what was running.
func printVersion(w io.Writer, bi *debug.BuildInfo) {
	fmt.Fprintf(w, "offload %s %s %s/%s\n", versionOf(bi), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	v, ok := vcsOf(bi)
	if !ok {
		fmt.Fprintln(w, "revision: none in the build info (built outside a git checkout, with -buildvcs=false, or by go run/go test)")
		return
	}
	modified := "clean"
	if v.modified {
		modified = "modified (the work tree had uncommitted changes)"
	}
	fmt.Fprintf(w, "revision: %s, committed %s, %s\n", v.revision, cmp.Or(v.time, "at an unknown time"), modified)
}

// buildVersion is the version the packaging command stamps into the
// binaries it builds (-ldflags -X main.buildVersion=..., the tree's git
// describe; packaging/build), so that a packaged binary names its version
// whatever else the build info holds. Empty in other builds.
var buildVersion string

// version is the stamped version, the module version, or the VCS revision
// for a build from a checkout: what reports (bench, speed) record.
func version() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	if buildVersion != "" {
		return buildVersion
	}
	if bi == nil {
		return "(unknown)"
	}
	v := bi.Main.Version
	if vcs, ok := vcsOf(bi); ok && (v == "" || v == "(devel)") {
		rev := vcs.revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if vcs.modified {
			rev += "+dirty"
		}
		return "devel-" + rev
	}
	return v
}
