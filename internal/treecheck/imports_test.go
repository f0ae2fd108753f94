package treecheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// module is the import path of this module; rules name packages relative to it.
const module = "github.com/offload-dev/offload"

// importRule says what one package (or, with a trailing "/...", a package
// and everything below it) may import. Only the package's own files count,
// not its tests: an external test may reach above (engine's tests use
// tunnel/record).
type importRule struct {
	pkg string
	// project, when not nil, lists the only packages of this module the
	// package may import directly; an empty list means none.
	project []string
	// stdOnly: every direct import is in the standard library.
	stdOnly bool
	// never lists packages of this module that must not be in the
	// package's dependencies at all, directly or through another.
	never []string
	// heavy lists packages of any module (full import paths, "/..."
	// allowed) that must not be linked into the package at all: what
	// docs/budgets.md's size cuts took out of the router binary, which
	// one stray import would bring back.
	heavy []string
	// awaited marks a rule for a package issue 18 plans and the tree lacks
	// yet; it applies when the package appears. A rule that matches no
	// package and is not awaited is a typo, and fails.
	awaited bool
}

// importRules are docs/architecture.md's "Imports go downward only"; a
// change to one is a change to the design and belongs in both places.
var importRules = []importRule{
	{pkg: "engine", project: []string{}},
	{pkg: "engine/enginetest", project: []string{"engine"}},
	{pkg: "tunnel/suite", project: []string{"engine"}},
	{pkg: "tunnel/record", project: []string{"engine", "tunnel/suite"}},
	{pkg: "tunnel/handshake", project: []string{"tunnel/record", "tunnel/suite"}},
	{pkg: "tunnel/allow", stdOnly: true},
	{pkg: "tunnel/mux", project: []string{"tunnel/internal/netguard"}},
	// The stream layer (request, response, chunks, the splice) knows
	// streams and sockets, never a Server, a Client or a link.
	{pkg: "tunnel/stream", project: []string{"tunnel/mux", "tunnel/internal/netguard"}},
	// The live view (Status, links, rates, streams by kind) is fed by
	// the tunnel and knows no Server or Client.
	{pkg: "tunnel/live", project: []string{"engine", "tunnel/record", "internal/metrics"}},
	// Session resumption knows bytes and links, not yamux or the record layer.
	{pkg: "tunnel/resume", stdOnly: true},
	// When and where the client dials next: no link, no Client.
	{pkg: "tunnel/redial", project: []string{"internal/metrics"}},
	// The handshake slot table knows connections and a first flight's
	// header, never a Server or a link.
	{pkg: "tunnel/slots", project: []string{"tunnel/handshake", "tunnel/suite", "tunnel/internal/netguard"}},
	// The engine checks know engines and the record layer's verifier and
	// stall watch, never a Server, a Client or a link.
	{pkg: "tunnel/enginecheck", project: []string{"engine", "tunnel/record", "tunnel/suite"}},
	// The /metrics page knows the families' names, not who writes them.
	{pkg: "tunnel/exposition", project: []string{"internal/metrics"}},
	{pkg: "tunnel/internal/netguard", stdOnly: true},
	{pkg: "tunnel/internal/socks5", stdOnly: true},
	// The PROXY reader knows no Server: caps in, drops out by callback.
	{pkg: "tunnel/proxyproto", project: []string{"tunnel/internal/netguard", "internal/metrics"}},
	// The metrics listener serves pages others write (Options.Metrics,
	// Status, Health): it knows no Server, so tunnel's tests can serve
	// a real one through it, and cmd wires the two.
	{pkg: "tunnel/metricsserver", project: []string{"tunnel/internal/netguard"}},
	// The control socket serves answers others make (Handlers), as the
	// metrics listener does, with the standard library alone: no
	// net/http, which the metrics listener may drop (docs/budgets.md).
	{pkg: "tunnel/control", stdOnly: true, heavy: []string{"net/http"}},
	// The sample writers /metrics is made of, for every layer that counts.
	{pkg: "internal/metrics", stdOnly: true},
	// The tunnel sees engines only through engine and its own layers
	// below; policy (selector), settings (config) and the metrics server
	// are wired above it by cmd.
	{
		pkg:     "tunnel",
		project: []string{"engine", "tunnel/...", "internal/metrics"},
		never:   []string{"selector/...", "config/...", "measure/...", "tunnel/metricsserver/...", "cmd/...", "harness/..."},
	},
	{pkg: "selector", never: []string{"tunnel", "config/...", "cmd/..."}},
	// config names the tunnel's and the record layer's defaults and
	// limits (their exported constants, never copies) and checks an
	// engine spec with the selector; it is wired into the ends by cmd.
	{pkg: "config", never: []string{"cmd/...", "harness/..."}},
	// The YAML subset the configs are written in: the standard library alone.
	{pkg: "config/yamlite", stdOnly: true},
	// internal/ is the ground floor: helpers that know nothing of the
	// engines, the tunnel or the measuring packages above them.
	{pkg: "internal/...", project: []string{"internal/..."}},
	// measure/ sits above the record layer: it times engines and the
	// record layer (speed), makes load (bench) and judges figures (method,
	// ratio), and never reaches the tunnel, the selector or a command.
	{pkg: "measure/...", never: []string{"tunnel", "selector/...", "config/...", "cmd/...", "harness/..."}},
	{pkg: "measure/speed", project: []string{"engine", "tunnel/record", "tunnel/suite", "measure/ratio", "internal/sysinfo"}},
	{pkg: "measure/bench", project: []string{}},
	{pkg: "measure/method", project: []string{"measure/ratio"}},
	{pkg: "measure/ratio", stdOnly: true},
	// The shared test helpers (ports, processes, loggers, leak checks)
	// serve every package's tests, so they know none of them.
	{pkg: "internal/testutil", project: []string{}},
	{pkg: "harness/...", never: []string{"cmd/..."}},
	// net/http links crypto/tls, x509, the NIST curves and ML-KEM: 1 MB
	// of the mipsle binary; crypto/ecdh keeps P-256 (docs/budgets.md).
	{pkg: "cmd/offload", heavy: []string{"net/http/...", "crypto/tls/...", "crypto/x509/...", "crypto/ecdh"}},
	// Nor the packaging command's archive libraries (nfpm and what it
	// pulls in): packaging/build is a main package of its own.
	{pkg: "cmd/offload", heavy: []string{"github.com/goreleaser/..."}},
	// Nor the browser driver of LuCI's test (packaging/luci): a test-only
	// dependency, for the test binary alone.
	{pkg: "cmd/offload", heavy: []string{"github.com/chromedp/..."}},
	// Nor go-yaml (448 KiB on MIPS): config/yamlite parses the configs;
	// go-yaml is left to yamlite's test, which checks the two agree.
	{pkg: "cmd/offload", heavy: []string{"github.com/goccy/..."}},
}

// listedPackage is the part of `go list -json` the rules need.
type listedPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Standard   bool
}

// listPackages runs go list over the module for one target, keyed by
// import path, the standard library included (its Standard flag is how a
// stdOnly rule tells it from a third-party module).
func listPackages(t *testing.T, goos, goarch string) map[string]listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Deps,Standard", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list (%s/%s): %v: %s", goos, goarch, err, stderr.Bytes())
	}
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list (%s/%s) output: %v", goos, goarch, err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// matches reports whether the module-relative path rel is pattern, or is
// below it when pattern ends in "/...".
func matches(pattern, rel string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

func matchesAny(patterns []string, rel string) bool {
	for _, p := range patterns {
		if matches(p, rel) {
			return true
		}
	}
	return false
}

// relative returns path relative to the module and whether it is in it.
func relative(path string) (string, bool) {
	if path == module {
		return "", true
	}
	return strings.CutPrefix(path, module+"/")
}

// importViolations checks every rule against pkgs and returns one line per
// broken rule and import.
func importViolations(pkgs map[string]listedPackage) (problems []string, unmatched []importRule) {
	for _, r := range importRules {
		seen := false
		for path, p := range pkgs {
			rel, ok := relative(path)
			if !ok || !matches(r.pkg, rel) {
				continue
			}
			seen = true
			for _, imp := range p.Imports {
				irel, inModule := relative(imp)
				switch {
				case r.stdOnly && !pkgs[imp].Standard:
					problems = append(problems, rel+" imports "+imp+": it may import only the standard library")
				case r.project != nil && inModule && !matchesAny(r.project, irel):
					allowed := "no package of offload"
					if len(r.project) > 0 {
						allowed = "only these of offload: " + strings.Join(r.project, ", ")
					}
					problems = append(problems, rel+" imports "+irel+": it may import "+allowed)
				}
			}
			for _, dep := range p.Deps {
				if drel, inModule := relative(dep); inModule && matchesAny(r.never, drel) {
					problems = append(problems, rel+" depends on "+drel+" (directly or through another package): never "+strings.Join(r.never, ", "))
				}
				if matchesAny(r.heavy, dep) {
					problems = append(problems, rel+" links "+dep+" (directly or through another package): too heavy for the router binary, see docs/budgets.md")
				}
			}
		}
		if !seen {
			unmatched = append(unmatched, r)
		}
	}
	return problems, unmatched
}

// TestImportRules: the packages import only what docs/architecture.md says
// they may, for the host and the targets whose files differ (linux, the
// router's mipsle, darwin's _other files).
func TestImportRules(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command: %v", err)
	}
	for _, target := range [][2]string{{"linux", "amd64"}, {"linux", "mipsle"}, {"darwin", "arm64"}} {
		pkgs := listPackages(t, target[0], target[1])
		problems, unmatched := importViolations(pkgs)
		for _, p := range problems {
			t.Errorf("%s/%s: %s", target[0], target[1], p)
		}
		for _, r := range unmatched {
			if r.awaited {
				t.Logf("%s/%s: no package %s yet: its rule applies when it appears", target[0], target[1], r.pkg)
			} else {
				t.Errorf("%s/%s: the rule for %s matches no package: fix the rule or remove it", target[0], target[1], r.pkg)
			}
		}
	}
}

// TestImportRulesCatch: the checker reports a package that breaks each
// kind of rule, so that a quiet TestImportRules means the tree obeys them.
func TestImportRulesCatch(t *testing.T) {
	p := func(path string, imports ...string) listedPackage {
		return listedPackage{ImportPath: path, Imports: imports, Deps: imports}
	}
	pkgs := map[string]listedPackage{
		"fmt":                                {ImportPath: "fmt", Standard: true},
		"go.uber.org/zap":                    p("go.uber.org/zap"),
		module + "/engine":                   p(module+"/engine", "fmt", module+"/tunnel/suite"),
		module + "/tunnel/internal/netguard": p(module+"/tunnel/internal/netguard", "go.uber.org/zap"),
		module + "/tunnel": {
			ImportPath: module + "/tunnel",
			Imports:    []string{module + "/selector", module + "/tunnel/status"},
			Deps:       []string{module + "/selector", module + "/tunnel/status", module + "/tunnel/metricsserver"},
		},
		module + "/harness/vm":             p(module+"/harness/vm", module+"/cmd/offload/internal/x"),
		module + "/tunnel/record":          p(module+"/tunnel/record", module+"/engine"),
		module + "/cmd/offload/internal/x": p(module + "/cmd/offload/internal/x"),
		module + "/tunnel/internal/socks5": p(module+"/tunnel/internal/socks5", "fmt"),
		module + "/tunnel/metricsserver":   p(module + "/tunnel/metricsserver"),
		module + "/tunnel/status":          p(module+"/tunnel/status", module+"/tunnel/metricsserver"),
		module + "/cmd/offload":            {ImportPath: module + "/cmd/offload", Imports: []string{"go.uber.org/zap"}, Deps: []string{"go.uber.org/zap", "net/http", "crypto/tls", "github.com/goreleaser/nfpm/v2/ipk", "github.com/chromedp/chromedp"}},
	}
	problems, _ := importViolations(pkgs)
	for _, want := range []string{
		"engine imports tunnel/suite",
		"tunnel/internal/netguard imports go.uber.org/zap",
		"tunnel imports selector",
		"tunnel depends on selector",
		"harness/vm depends on cmd/offload/internal/x",
		"tunnel depends on tunnel/metricsserver",
		"cmd/offload links net/http",
		"cmd/offload links crypto/tls",
		"cmd/offload links github.com/goreleaser/nfpm/v2/ipk",
		"cmd/offload links github.com/chromedp/chromedp",
	} {
		found := false
		for _, got := range problems {
			found = found || strings.HasPrefix(got, want)
		}
		if !found {
			t.Errorf("no problem reported as %q; got:\n%s", want, strings.Join(problems, "\n"))
		}
	}
	for _, got := range problems {
		if strings.HasPrefix(got, "tunnel/record") || strings.HasPrefix(got, "tunnel/internal/socks5") {
			t.Errorf("a package that keeps its rule was reported: %s", got)
		}
	}
}
