package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestLuciSchema: schema.json is the init script's TYPES and OPTS_* (with
// $OPTS_common expanded), and the Settings page describes every option of
// it and nothing else, so a new UCI option fails here until the page
// shows it with its own title (it would get a bare text field meanwhile).
func TestLuciSchema(t *testing.T) {
	root := repoRoot(t)
	init, err := os.ReadFile(filepath.Join(root, filesDir, "offload.init"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := initSchema(init)
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string]string{
		"offload": "enabled role config memory_limit",
		"forward": "listen service",
	} {
		if got := strings.Join(s.Types[typ], " "); got != want {
			t.Errorf("schema %s: %q, want %q", typ, got, want)
		}
	}
	for _, o := range []string{"key_file", "suite", "engine", "log_format", "listen", "socks_allow"} {
		if !contains(s.Types["server"], o) {
			t.Errorf("schema server lacks %s (from $OPTS_common or OPTS_server): %v", o, s.Types["server"])
		}
	}
	if len(s.Suites) == 0 || !contains(s.Suites, "aes-256-ctr-hmac-sha256") {
		t.Errorf("suites %v", s.Suites)
	}
	// A broken schema is an error, not an empty page.
	if _, err := initSchema([]byte("TYPES=\"offload server\"\nOPTS_offload=\"enabled\"\n")); err == nil {
		t.Error("a type without OPTS_ passed")
	}

	js, err := os.ReadFile(filepath.Join(root, luciDir, "htdocs/luci-static/resources/view/offload/settings.js"))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\t'([a-z_.]+)': \[ _\(`).FindAllSubmatch(js, -1) {
		fields[string(m[1])] = true
	}
	if len(fields) < 20 {
		t.Fatalf("found %d FIELDS in settings.js: the pattern no longer matches", len(fields))
	}
	used := map[string]bool{}
	for _, typ := range s.Order {
		for _, o := range s.Types[typ] {
			switch {
			case fields[typ+"."+o]:
				used[typ+"."+o] = true
			case typ != "offload" && fields[o]:
				used[o] = true
			default:
				t.Errorf("settings.js: FIELDS has no entry for %s.%s (the init script's OPTS_%s has it)", typ, o, typ)
			}
		}
	}
	for f := range fields {
		if !used[f] {
			t.Errorf("settings.js: FIELDS has %s, which no OPTS_ of the init script has", f)
		}
	}
	// Every section type but the main one has its place on the page.
	for _, typ := range s.Order {
		if typ != "offload" && !regexp.MustCompile(`\[ '`+typ+`', _\(`).Match(js) {
			t.Errorf("settings.js: SECTIONS has no %s", typ)
		}
	}
}

// TestLuciACL: the app's ACL grants exactly the commands and files the
// pages use: each exec, read or write grant names a command line or path
// whose every word is a literal in the pages' code, and each command the
// pages run is granted. (The browser test runs the pages with only this
// ACL and LuCI's base ones.)
func TestLuciACL(t *testing.T) {
	root := repoRoot(t)
	var acl map[string]struct {
		Read, Write struct {
			File map[string][]string `json:"file"`
			Ubus map[string][]string `json:"ubus"`
			UCI  []string            `json:"uci"`
		}
	}
	data, err := os.ReadFile(filepath.Join(root, luciDir, "root/usr/share/rpcd/acl.d/luci-app-offload.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &acl); err != nil {
		t.Fatal(err)
	}
	if len(acl) != 1 {
		t.Fatalf("ACL groups %d, want 1", len(acl))
	}
	var code strings.Builder
	for _, p := range []string{"settings", "status", "engines"} {
		b, err := os.ReadFile(filepath.Join(root, luciDir, "htdocs/luci-static/resources/view/offload", p+".js"))
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	js := code.String()
	lit := func(w string) bool {
		return strings.Contains(js, "'"+w+"'") || strings.Contains(js, ","+w+",") || strings.Contains(js, "'"+w+",") || strings.Contains(js, ","+w+"'")
	}
	var granted []string
	for _, g := range acl {
		for _, scope := range []map[string][]string{g.Read.File, g.Write.File} {
			for path, perms := range scope {
				granted = append(granted, path)
				words := strings.Fields(path)
				for i, w := range words {
					// status's -c is the running YAML, which the page reads
					// from /var/etc/offload/instance: the init script's
					// folder or /etc/offload, nowhere else.
					if i > 0 && words[i-1] == "-c" && strings.HasPrefix(path, "/usr/bin/offload status -json -c ") {
						if !strings.HasPrefix(w, "/var/etc/offload/") && !strings.HasPrefix(w, "/etc/offload/") {
							t.Errorf("grant %q: status of a config outside /var/etc/offload and /etc/offload", path)
						}
						continue
					}
					if strings.Contains(w, "*") {
						t.Errorf("grant %q: a wildcard outside status's config path", path)
						continue
					}
					if !lit(w) {
						t.Errorf("grant %q (%v): %q is not a literal of the pages: unused?", path, perms, w)
					}
				}
			}
		}
		if strings.Join(g.Write.UCI, " ") != "offload" || strings.Join(g.Read.UCI, " ") != "offload" {
			t.Errorf("uci grants read %v write %v, want offload alone", g.Read.UCI, g.Write.UCI)
		}
	}
	sort.Strings(granted)
	// The command lines the pages run, as rpcd joins them for its check.
	for _, cmd := range []string{
		"/usr/bin/offload engines -json",
		"/usr/bin/offload keygen -fingerprint /etc/offload/offload.key",
		"/usr/bin/offload keygen -o /etc/offload/offload.key",
		"/usr/bin/offload keygen -f -o /etc/offload/offload.key",
		"/usr/bin/offload speed -json -engine software -elapsed -seconds 1 -sizes 16,64,256,1024,4096,16384",
		"/usr/bin/offload speed -json -engine afalg -elapsed -seconds 1 -sizes 16,64,256,1024,4096,16384",
		"/usr/bin/offload speed -json -engine cryptodev -elapsed -seconds 1 -sizes 16,64,256,1024,4096,16384",
		"/etc/init.d/offload check /var/run/offload-luci.uci",
		"/usr/bin/offload status -json -c /var/etc/offload/server.yaml",
	} {
		if !contains(granted, cmd) {
			t.Errorf("the pages run %q, which the ACL does not grant (grants: %q)", cmd, granted)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var updatePot = flag.Bool("update-pot", false, "rewrite luci-app-offload's po/templates/offload.pot")

// TestLuciPot: po/templates/offload.pot, the template translators start
// from (as LuCI's i18n-scan.pl makes one for each app), holds every
// string the pages pass to _() and the menu's titles, and nothing else.
// go test ./packaging/build -run TestLuciPot -update-pot rewrites it.
func TestLuciPot(t *testing.T) {
	root := repoRoot(t)
	ids := map[string]bool{}
	lit := regexp.MustCompile(`\b_\('((?:[^'\\]|\\.)*)'\)`)
	for _, p := range []string{"settings", "status", "engines"} {
		js, err := os.ReadFile(filepath.Join(root, luciDir, "htdocs/luci-static/resources/view/offload", p+".js"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range lit.FindAllSubmatch(js, -1) {
			ids[strings.ReplaceAll(string(m[1]), `\'`, `'`)] = true
		}
	}
	var menu map[string]struct{ Title string }
	data, err := os.ReadFile(filepath.Join(root, luciDir, "root/usr/share/luci/menu.d/luci-app-offload.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &menu); err != nil {
		t.Fatal(err)
	}
	for _, m := range menu {
		ids[m.Title] = true
	}
	if len(ids) < 100 {
		t.Fatalf("%d strings: the pattern no longer finds the pages' _() calls", len(ids))
	}
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)
	var b strings.Builder
	b.WriteString("msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=UTF-8\"\n")
	q := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	for _, id := range sorted {
		fmt.Fprintf(&b, "\nmsgid \"%s\"\nmsgstr \"\"\n", q.Replace(id))
	}
	path := filepath.Join(root, luciDir, "po/templates/offload.pot")
	if *updatePot {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != b.String() {
		t.Errorf("%s is not what the pages' _() strings make: go test ./packaging/build -run TestLuciPot -update-pot", path)
	}
}
