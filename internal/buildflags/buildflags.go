// Package buildflags owns the go build flags of a router binary. The
// packages users install (packaging/build) and the binary the size budget
// measures (harness/budget size) are both built with Args, so the figure
// in docs/budgets.md is the size of what ships.
//
// Besides -trimpath and a stripped link, Args turns inlining off (-l) in
// the packages of Cold: code that runs at start-up, on a command, on a
// scrape or once per link, never per frame. Inlining copies a callee into
// every caller; in those packages that buys nothing a user could measure
// and costs 384 KiB of the mipsle binary (docs/budgets.md). The data path
// (Hot) keeps the compiler's defaults; a test fails if a Cold pattern
// matches a Hot package or no package of cmd/offload at all. Tags leave
// the CPU profiler out.
package buildflags

import "strings"

// module is offload's module path, the prefix of its own packages.
const module = "github.com/offload-dev/offload"

// Cold are the go list patterns built with -gcflags=PATTERN=-l: start-up
// (flags, config and its YAML parser, the logger), commands (cmd/offload:
// bench, speed, status, engines), what answers a scrape or a control
// socket, and the handshake (once per link).
var Cold = []string{
	// Start-up: flags, the config file, the logger.
	"flag",
	"fmt",
	"reflect",
	"strconv",
	"sort",
	"encoding/json",
	"encoding/base64",
	"encoding/hex",
	"path/filepath",
	"os/signal",
	"log",
	"go.uber.org/multierr",
	"go.uber.org/zap/...",
	module + "/config/...",
	// Commands and their tables: bench, speed, calibrate, status.
	module + "/cmd/offload",
	module + "/measure/bench",
	module + "/measure/method",
	module + "/measure/speed",
	module + "/internal/sysinfo",
	// Scrapes, the control socket, URLs of the metrics listener.
	module + "/tunnel/metricsserver",
	module + "/tunnel/control",
	"net/url",
	"net/textproto",
	// Once per link: the Noise handshake's state machine (its hashes and
	// X25519 are crypto and stay Hot).
	"github.com/flynn/noise",
	// The tunnel's servers, clients and their links, sessions, status,
	// SOCKS and reverse setup: per link or per stream, never per frame
	// (the copy loops are tunnel/stream's). tunnel/resume does a few
	// integer operations per frame beside the record layer's crypto; both
	// fit the 6 MiB this way (docs/budgets.md).
	module + "/tunnel",
	module + "/tunnel/resume",
	module + "/tunnel/handshake",
	module + "/tunnel/proxyproto",
	module + "/tunnel/slots",
	module + "/tunnel/enginecheck",
	module + "/tunnel/exposition",
	module + "/tunnel/allow",
	// Read when status is sampled or asked for, when the client redials,
	// when calibration takes a median, on a scrape: never per frame. Of
	// the candidates measured, these four shrink both segments (others,
	// e.g. net/netip, math/big, hash/crc32, grew one or did nothing).
	module + "/tunnel/live",
	module + "/tunnel/redial",
	module + "/measure/ratio",
	"runtime/debug",
	// Read back: a calibration profile at start, a status for the
	// command (docs/budgets.md).
	module + "/internal/jsonlite",
	// A SOCKS client's greeting, once per connection.
	module + "/tunnel/internal/socks5",
}

// Hot are the go list patterns of the data path, never in Cold: the
// runtime, the network and system calls, time (deadlines), crypto, the
// engines, the record layer and mux, the tunnel's copy loops (tunnel/stream), and the
// selector, whose Policy picks an engine for every frame.
var Hot = []string{
	"runtime",
	"internal/...",
	"sync/...",
	"net",
	"syscall",
	"time",
	"io",
	"bufio",
	"bytes",
	"crypto/...",
	"golang.org/x/crypto/...",
	"golang.org/x/sys/...",
	"filippo.io/edwards25519/...",
	module + "/engine/...",
	module + "/tunnel/stream",
	module + "/tunnel/record",
	module + "/tunnel/mux",
	module + "/tunnel/suite",
	module + "/tunnel/internal/netguard",
	module + "/selector",
	module + "/internal/metrics",
}

// Tags are the build tags of a router binary: nopprof leaves runtime/pprof
// (and the gzip writer its profiles need) out, 192 KiB on MIPS, so
// -cpuprofile answers with an error there (cmd/offload/cpuprofile_nopprof.go).
// A build of go build ./cmd/offload keeps it.
const Tags = "nopprof"

// LDFlags are the linker flags of a router binary, version (if not empty)
// stamped into main.buildVersion so that `offload version` names it.
func LDFlags(version string) string {
	s := "-s -w"
	if version != "" {
		s += " -X main.buildVersion=" + version
	}
	return s
}

// Args returns the flags of `go build` (after "build", before the
// package) for a router binary: -trimpath, -tags=Tags, LDFlags(version)
// and one -gcflags=PATTERN=-l per Cold pattern. Build with CGO_ENABLED=0.
func Args(version string) []string {
	args := []string{"-trimpath", "-tags=" + Tags, "-ldflags=" + LDFlags(version)}
	for _, p := range Cold {
		args = append(args, "-gcflags="+p+"=-l")
	}
	return args
}

// Command is Args as a shell command line for the docs: go build, the
// flags quoted where they hold spaces, -o out and pkg.
func Command(version, out, pkg string) string {
	parts := []string{"go", "build"}
	for _, a := range Args(version) {
		if k, v, ok := strings.Cut(a, "="); ok && strings.ContainsAny(v, " \t") {
			a = k + "='" + v + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(append(parts, "-o", out, pkg), " ")
}
