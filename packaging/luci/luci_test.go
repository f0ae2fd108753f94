// Package luci tests luci-app-offload in a real browser against the real
// LuCI: Debian's chromium, headless, driven by chromedp, against OpenWrt's
// uhttpd, ubusd, rpcd, ucode and luci-base built from the fixtures in
// ../shared/third_party by their build-openwrt-userland.sh, with the app
// installed from its package by the real opkg of that build, a running
// offload server (in the chroot, started by the init script) and a client
// behind it, all on 127.0.0.1.
//
// procd is not among the fixtures: the init script runs under
// packaging/openwrt/test's rc.common and procd.sh with PROCD_LIVE=1 (real
// processes, real signals), which stand in for procd, and
// testdata/procd-trigger.uc stands in for procd's reload trigger: on the
// config.change event rpcd sends after Save & Apply it runs
// "/etc/init.d/offload reload" (docs/testing.md).
//
// Without chromium, the fixtures or root it skips, saying which; under
// CI=true it fails instead. scripts/test.sh's luci stage runs it.
package luci

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/offload-dev/offload/internal/testutil"
)

func ptr[T any](v T) *T { return &v }

// need skips (or, under CI=true, fails) for a missing prerequisite.
func need(t *testing.T, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("luci: %s (CI=true: required)", what)
	}
	t.Skipf("luci: %s", what)
}

func repoRoot(t *testing.T) string {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// thirdParty is the folder of the OpenWrt fixtures: OFFLOAD_OPENWRT_FIXTURES,
// or ../shared/third_party beside the clone (as in CI).
func thirdParty(t *testing.T) string {
	if d := os.Getenv("OFFLOAD_OPENWRT_FIXTURES"); d != "" {
		return d
	}
	return filepath.Join(repoRoot(t), "..", "shared", "third_party")
}

// freePort is a free loopback port (testutil's draw, outside the
// ephemeral range).
func freePort(t *testing.T) int {
	_, p, _ := net.SplitHostPort(testutil.FreePort(t))
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

type env struct {
	t      *testing.T
	repo   string
	tp     string
	root   string // the LuCI root (a copy of the built userland)
	port   int    // LuCI's
	bin    string // offload for this host, for the client
	shots  string // where screenshots go ("" none)
	srvLog string
}

func (e *env) run(name string, args ...string) string {
	e.t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// chroot runs a command in the LuCI root, with the stand-ins' settings.
func (e *env) chroot(args ...string) (string, error) {
	cmd := exec.Command("chroot", append([]string{e.root}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "PROCD_LIVE=1"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *env) write(p, data string, mode os.FileMode) {
	e.t.Helper()
	full := filepath.Join(e.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(data), mode); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) read(p string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.root, p))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// built is what every format's run shares: the userland (built once into
// a cache), the packages of both formats and the host's offload binary.
type built struct {
	userland, dist, bin string
}

// setup builds (or reuses) the userland, copies it, installs the packages
// of FORMAT (ipk: with the real opkg; apk: with the real apk-tools v3)
// and the stand-ins the init script needs.
func setup(t *testing.T, format string, b *built) *env {
	need(t, os.Geteuid() == 0, "needs root (chroot, mknod)")
	_, err := os.Stat("/usr/bin/chromium")
	need(t, err == nil, "no /usr/bin/chromium (apt-get install chromium; scripts/deps.sh)")
	_, err = exec.LookPath("busybox")
	need(t, err == nil, "no busybox (OpenWrt's shell and tools for the init script; scripts/deps.sh)")
	e := &env{t: t, repo: repoRoot(t), tp: thirdParty(t), shots: os.Getenv("OFFLOAD_LUCI_SCREENSHOTS")}
	_, err = os.Stat(filepath.Join(e.tp, "build-openwrt-userland.sh"))
	need(t, err == nil, "no OpenWrt fixtures in "+e.tp+" (set OFFLOAD_OPENWRT_FIXTURES)")

	// The userland, built once into a cache (a rerun costs 0.3 s).
	if b.userland == "" {
		b.userland = os.Getenv("OFFLOAD_LUCI_USERLAND")
		if b.userland == "" {
			cache, err := os.UserCacheDir()
			if err != nil {
				t.Fatal(err)
			}
			b.userland = filepath.Join(cache, "offload-luci", "userland")
		}
		if out, err := exec.Command(filepath.Join(e.tp, "build-openwrt-userland.sh"), b.userland).CombinedOutput(); err != nil {
			t.Fatalf("build-openwrt-userland.sh %s: %v\n%s", b.userland, err, tail(out, 40))
		}
	}
	e.root = filepath.Join(t.TempDir(), "root")
	e.run("cp", "-a", b.userland, e.root)
	// A router's folders are root's alone (the userland was built under
	// a umask that left them group-writable, and offload checks the key's
	// folders as ssh does); sticky ones (/tmp) stay as they are.
	err = filepath.WalkDir(e.root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil || fi.Mode()&os.ModeSticky != 0 {
			return err
		}
		return os.Chmod(p, fi.Mode().Perm()&^0o022)
	})
	if err != nil {
		t.Fatal(err)
	}

	// The packages, by the packaging command, for this host.
	if b.dist == "" {
		b.dist = filepath.Join(os.TempDir(), fmt.Sprintf("offload-luci-dist-%d", os.Getpid()))
		build := exec.Command("go", "run", "./packaging/build", "-o", b.dist, "-arch", "x86_64", "-source=false")
		build.Dir = e.repo
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go run ./packaging/build: %v\n%s", err, out)
		}
		b.bin = filepath.Join(b.dist, "offload-host")
		gb := exec.Command("go", "build", "-o", b.bin, "./cmd/offload")
		gb.Dir = e.repo
		if out, err := gb.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	e.bin = b.bin

	// OpenWrt's shell and tools: busybox, as /bin/sh and its applets.
	bb, _ := exec.LookPath("busybox")
	e.run("cp", bb, filepath.Join(e.root, "bin/busybox"))
	os.Remove(filepath.Join(e.root, "bin/sh"))
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range strings.Fields(string(list)) {
		if exists(filepath.Join(e.root, "bin", a)) || exists(filepath.Join(e.root, "usr/bin", a)) || exists(filepath.Join(e.root, "usr/sbin", a)) {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(e.root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}

	e.install(format, b.dist)
	for _, p := range []string{"usr/bin/offload", "etc/init.d/offload", "www/luci-static/resources/view/offload/settings.js",
		"www/luci-static/resources/offload/schema.json", "usr/share/rpcd/acl.d/luci-app-offload.json", "usr/share/luci/menu.d/luci-app-offload.json"} {
		if !exists(filepath.Join(e.root, p)) {
			t.Fatalf("after opkg install, /%s is missing", p)
		}
	}

	// procd's stand-ins (packaging/openwrt/test), where the test rc.common
	// looks for them (beside it), and uci's shell functions (OpenWrt's
	// /lib/config/uci.sh) from the uci fixture.
	std := filepath.Join(e.repo, "packaging/openwrt/test")
	e.run("cp", filepath.Join(std, "rc.common"), filepath.Join(e.root, "etc/rc.common"))
	e.run("cp", filepath.Join(std, "procd.sh"), filepath.Join(e.root, "etc/procd.sh"))
	e.run("mkdir", "-p", filepath.Join(e.root, "usr/share/offload-test/share"))
	e.run("cp", filepath.Join(std, "functions.sh"), filepath.Join(e.root, "usr/share/offload-test/functions.sh"))
	// rpcd runs commands with an empty environment (run-openwrt-luci.sh
	// starts it with env -i): the stand-ins' settings are defaults here.
	e.write("etc/functions.sh", "# test stand-in: see packaging/luci/luci_test.go\n"+
		"OFFLOAD_UCI=${OFFLOAD_UCI:-/usr/share/offload-test}\nPROCD_DIR=${PROCD_DIR:-/var/run/procd-standin}\nPROCD_LIVE=${PROCD_LIVE:-1}\n"+
		"mkdir -p \"$PROCD_DIR\"\n. /usr/share/offload-test/functions.sh\n", 0o644)
	uciTar := glob1(t, filepath.Join(e.tp, "openwrt-uci-*.tar.gz"))
	x := t.TempDir()
	e.run("tar", "xzf", uciTar, "-C", x, "--wildcards", "*/sh/uci.sh")
	e.run("cp", glob1(t, filepath.Join(x, "*", "sh", "uci.sh")), filepath.Join(e.root, "usr/share/offload-test/share/uci.sh"))

	return e
}

// install puts offload and luci-app-offload into the root with the
// package manager of FORMAT from the same build, offline, as an image
// build does (IPKG_INSTROOT: the scripts enable, start nothing).
// luci-base is in the root, built from source rather than installed by a
// package manager: each is told so (opkg: its status entry; apk: a
// virtual package of that name), so that luci-app-offload's dependencies,
// luci-base and offload of the same version, are resolved for real.
func (e *env) install(format, dist string) {
	t := e.t
	env := append(os.Environ(), "IPKG_INSTROOT="+e.root, "LD_LIBRARY_PATH="+filepath.Join(e.root, "usr/lib"))
	pm := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(e.root, "usr/bin", name), args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	switch format {
	case "ipk":
		conf := filepath.Join(t.TempDir(), "opkg.conf")
		if err := os.WriteFile(conf, []byte("dest root /\nlists_dir ext /var/opkg-lists\noption overlay_root /overlay\narch all 1\narch x86_64 10\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(e.root, "var/lock"), 0o755)
		e.write("usr/lib/opkg/status", "Package: luci-base\nVersion: git-daf2e0b\nStatus: install user installed\nArchitecture: all\nInstalled-Time: 1767225600\n\n", 0o644)
		e.write("usr/lib/opkg/info/luci-base.list", "", 0o644)
		t.Logf("opkg install:\n%s", pm("opkg-cl", "-f", conf, "-o", e.root, "--force-postinstall", "install",
			glob1(t, filepath.Join(dist, "x86_64", "offload_*.ipk")), glob1(t, filepath.Join(dist, "all", "luci-app-offload_*.ipk"))))
	case "apk":
		root := []string{"--root", e.root, "--allow-untrusted", "--no-network", "--force-no-chroot", "--preserve-env"}
		pm("apk", append(root, "add", "--initdb", "--virtual", "luci-base")...)
		t.Logf("apk add:\n%s", pm("apk", append(root, "add",
			glob1(t, filepath.Join(dist, "x86_64", "offload-*.apk")), glob1(t, filepath.Join(dist, "noarch", "luci-app-offload-*.apk")))...))
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func glob1(t *testing.T, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(pattern)
	if len(m) != 1 {
		t.Fatalf("%s: %v, want one", pattern, m)
	}
	return m[0]
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// backend is a TCP service on loopback: it answers each connection with
// its banner line, then reads and drops what comes.
func backend(t *testing.T, banner string) int {
	_, p, _ := net.SplitHostPort(testutil.Serve(t, func(c net.Conn) {
		fmt.Fprintf(c, "%s\n", banner)
		io.Copy(io.Discard, c)
	}))
	n, _ := strconv.Atoi(p)
	return n
}

// banner connects to the client's forward and reads the first line.
func banner(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// waitFor polls cond (bounded generously; no timing is asserted).
func waitFor(t *testing.T, what string, limit time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last string
	for {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, limit, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestLuCI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds OpenWrt's userland and drives a browser")
	}
	if os.Getenv("OFFLOAD_LUCI") != "1" {
		t.Skip("scripts/test.sh's luci stage runs it (OFFLOAD_LUCI=1)")
	}
	b := &built{}
	t.Cleanup(func() {
		if b.dist != "" {
			os.RemoveAll(b.dist)
		}
	})
	// OpenWrt 24.10 installs the .ipk with opkg, 25.12 the .apk with apk
	// v3: the whole run for each (screenshots from the apk one).
	for _, format := range []string{"ipk", "apk"} {
		t.Run(format, func(t *testing.T) { luciRun(t, setup(t, format, b), format == "apk") })
	}
}

func luciRun(t *testing.T, e *env, shots bool) {
	srvPort, fwdPort := freePort(t), freePort(t)
	one, two := backend(t, "backend-one"), backend(t, "backend-two")

	// The server: /etc/config/offload, started by the init script.
	if out, err := e.chroot("/usr/bin/offload", "keygen", "-o", "/etc/offload/offload.key"); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	e.write("etc/config/offload", fmt.Sprintf(`config offload 'main'
	option enabled '1'
	option role 'server'
	option memory_limit '32MiB'

config server 'server'
	option listen '127.0.0.1:%d'
	option key_file 'offload.key'
	option suite 'aes-256-ctr-hmac-sha256'
	option engine 'software'

config service 'echo'
	option target '127.0.0.1:%d'
`, srvPort, one), 0o600)
	if out, err := e.chroot("/etc/init.d/offload", "start"); err != nil {
		t.Fatalf("/etc/init.d/offload start (procd stand-in): %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := e.chroot("/etc/init.d/offload", "stop"); err != nil {
			t.Logf("offload stop: %v\n%s", err, out)
		}
	})
	e.srvLog = "var/run/procd-standin/server.log"
	waitFor(t, "the server listens", 60*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(e.root, e.srvLog))
		return bytes.Contains(b, []byte("listening")), string(b)
	})
	pid1 := strings.TrimSpace(e.read("var/run/procd-standin/server.pid"))

	// The client, on this host, behind the server (no control socket:
	// it would be left in this host's /var/run/offload when killed).
	cdir := t.TempDir()
	e.run("cp", filepath.Join(e.root, "etc/offload/offload.key"), filepath.Join(cdir, "offload.key"))
	os.WriteFile(filepath.Join(cdir, "client.yaml"), []byte(fmt.Sprintf(
		"server: 127.0.0.1:%d\nkey_file: offload.key\nsuite: aes-256-ctr-hmac-sha256\ncontrol: off\nforwards:\n  - listen: 127.0.0.1:%d\n    service: echo\n",
		srvPort, fwdPort)), 0o600)
	testutil.StartProc(t, "offload client", e.bin, "client", "-c", filepath.Join(cdir, "client.yaml"))
	fwd := fmt.Sprintf("127.0.0.1:%d", fwdPort)
	waitFor(t, "the tunnel carries a connection to backend-one", 60*time.Second, func() (bool, string) {
		b, err := banner(fwd)
		return b == "backend-one", fmt.Sprintf("%q %v", b, err)
	})

	// LuCI. root logs in with LuCI's base ACLs and the app's alone (not
	// the fixture's '*'), so a call the app's ACL does not grant fails
	// the pages here as on a router with a user limited to it.
	e.write("etc/config/rpcd", `config rpcd
	option socket /var/run/ubus/ubus.sock
	option timeout 30

config login
	option username 'root'
	option password '$p$root'
	list read 'unauthenticated'
	list read 'luci-base'
	list read 'luci-app-offload'
	list write 'luci-base'
	list write 'luci-app-offload'
`, 0o600)
	e.port = freePort(t)
	if out, err := exec.Command(filepath.Join(e.tp, "run-openwrt-luci.sh"), e.root, "start", strconv.Itoa(e.port)).CombinedOutput(); err != nil {
		t.Fatalf("run-openwrt-luci.sh start: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		exec.Command(filepath.Join(e.tp, "run-openwrt-luci.sh"), e.root, "stop").Run()
	})
	// procd's reload trigger, stood in for (testdata/procd-trigger.uc): on
	// rpcd's config.change for offload it runs /etc/init.d/offload reload.
	e.run("cp", "testdata/procd-trigger.uc", filepath.Join(e.root, "usr/share/offload-test/procd-trigger.uc"))
	trigger := exec.Command("chroot", e.root, "/usr/bin/ucode", "/usr/share/offload-test/procd-trigger.uc")
	trigger.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	tp, err := testutil.Start("procd trigger stand-in", trigger, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tp.Kill()
		if t.Failed() {
			t.Logf("procd trigger stand-in:\n%s", tp.Out)
		}
	})
	waitFor(t, "the stand-in's service object on ubus", 30*time.Second, func() (bool, string) {
		out, err := e.chroot("/usr/bin/ubus", "list", "service")
		return err == nil && strings.TrimSpace(out) == "service", out + tp.Out.String()
	})

	b := newBrowser(t)
	if !shots {
		b.shots = ""
	}
	page := func(path string) string {
		return fmt.Sprintf("http://127.0.0.1:%d/test-autologin.html?/cgi-bin/luci/admin/services/offload/%s", e.port, path)
	}

	t.Run("menu and settings", func(t *testing.T) {
		b.open(page("settings"), `document.querySelector('#cbi-offload-echo-target input')`)
		b.wait(`[...document.querySelectorAll('a')].some(a => /admin\/services\/offload/.test(a.href))`, "the menu entry under Services")
		fp := strings.TrimSpace(e.mustChroot("/usr/bin/offload", "keygen", "-fingerprint", "/etc/offload/offload.key"))
		b.wait(fmt.Sprintf(`(document.getElementById('offload-key-fingerprint')||{}).textContent == %q`, fp), "the key's fingerprint "+fp)
		key := strings.TrimSpace(e.read("etc/offload/offload.key"))
		if html := b.eval(`document.documentElement.outerHTML`); strings.Contains(html, key) || strings.Contains(html, key[:16]) {
			t.Fatal("the page holds the key")
		}
		// The engine choices are what offload engines finds here.
		opts := b.eval(`[...document.querySelectorAll('#cbi-offload-server-engine option')].map(o => o.value).join(' ')`)
		if !strings.Contains(opts, "software") || strings.Contains(opts, "afalg ") {
			t.Errorf("engine choices %q: want software and no engine this machine lacks", opts)
		}
		b.shot("luci-settings.png")
	})

	t.Run("save and apply", func(t *testing.T) {
		before := e.read("etc/config/offload")
		b.open(page("settings"), `document.querySelector('#cbi-offload-echo-target input')`)
		b.setInput("#cbi-offload-echo-target input", fmt.Sprintf("127.0.0.1:%d", two))
		b.saveApply()
		// LuCI applies with rollback: the browser must confirm that it
		// still reaches the router, or rpcd rolls the change back.
		b.waitLong(`document.body.innerText.includes('Configuration changes applied')`, "LuCI's apply and confirm", 150*time.Second)
		waitFor(t, "/etc/config/offload holds the new target", 120*time.Second, func() (bool, string) {
			s := e.read("etc/config/offload")
			return strings.Contains(s, fmt.Sprintf("127.0.0.1:%d", two)), s
		})
		if e.read("etc/config/offload") == before {
			t.Fatal("file unchanged")
		}
		// rpcd's apply sent config.change; the trigger's stand-in ran the
		// init script's reload, which re-rendered, validated and asked
		// procd to send SIGHUP.
		waitFor(t, "the reload trigger ran the init script's reload", 60*time.Second, func() (bool, string) {
			b, _ := os.ReadFile(filepath.Join(e.root, "var/run/procd-standin/trigger.log"))
			return bytes.Contains(b, []byte("signal offload server HUP")), string(b)
		})
		waitFor(t, "the server logs the SIGHUP reload", 60*time.Second, func() (bool, string) {
			b, _ := os.ReadFile(filepath.Join(e.root, e.srvLog))
			return bytes.Contains(b, []byte("SIGHUP: reloading")), string(b)
		})
		if pid := strings.TrimSpace(e.read("var/run/procd-standin/server.pid")); pid != pid1 {
			t.Fatalf("server pid %s, was %s: want the same process, reloaded", pid, pid1)
		}
		waitFor(t, "the change is live: the forward reaches backend-two", 60*time.Second, func() (bool, string) {
			b, err := banner(fwd)
			return b == "backend-two", fmt.Sprintf("%q %v", b, err)
		})
	})

	t.Run("a refused value", func(t *testing.T) {
		before := e.read("etc/config/offload")
		triggered := e.read("var/run/procd-standin/trigger.log")
		b.open(page("settings"), `document.querySelector('#cbi-offload-echo-target input')`)
		b.setInput("#cbi-offload-echo-target input", "nohost")
		b.saveApply()
		b.wait(`(document.querySelector('#cbi-offload-echo-target .offload-error')||{}).textContent`, "the validator's message next to the field")
		msg := b.eval(`document.querySelector('#cbi-offload-echo-target .offload-error').textContent`)
		if !strings.Contains(msg, "target") {
			t.Errorf("message next to the field: %q", msg)
		}
		b.shot("luci-settings-refused.png")
		if after := e.read("etc/config/offload"); after != before {
			t.Fatalf("a refused config changed /etc/config/offload:\n%s", after)
		}
		if b, err := banner(fwd); b != "backend-two" {
			t.Fatalf("after a refused config the forward says %q (%v), want backend-two", b, err)
		}
		if now := e.read("var/run/procd-standin/trigger.log"); now != triggered {
			t.Fatalf("a refused config reached the reload trigger:\n%s", now)
		}
		// Drop the refused change from the session, as LuCI's Revert does.
		b.eval(`window.offloadReverted = false, L.require('request').then(r => r.request(L.url('admin/uci/revert'),
			{ method: 'post', query: { sid: L.env.sessionid, token: L.env.token } })).then(r => window.offloadReverted = r.status), ''`)
		b.wait(`window.offloadReverted`, "the revert of the refused change")
	})

	t.Run("status", func(t *testing.T) {
		b.open(page("status"), `document.getElementById('offload-link-1-sent')`)
		var stop atomic.Bool
		done := make(chan error, 1)
		go func() { done <- transfer(fwd, &stop) }()
		defer func() {
			stop.Store(true)
			if err := <-done; err != nil {
				t.Errorf("transfer: %v", err)
			}
		}()
		var first int64 = -1
		waitFor(t, "the link's byte counter moves during the transfer", 120*time.Second, func() (bool, string) {
			v, _ := strconv.ParseInt(b.eval(`(document.getElementById('offload-link-1-received')||{dataset:{}}).dataset.value || ''`), 10, 64)
			if first < 0 && v > 0 {
				first = v
			}
			return first > 0 && v > first, fmt.Sprintf("first %d now %d", first, v)
		})
		// What offload status -json says of the server: its key's
		// fingerprint and its configured client, connected.
		fp := strings.TrimSpace(e.mustChroot("/usr/bin/offload", "keygen", "-fingerprint", "/etc/offload/offload.key"))
		b.wait(fmt.Sprintf(`document.getElementById('offload-status').innerText.includes(%q)`, fp), "the key's fingerprint "+fp)
		b.wait(`(document.getElementById('offload-clients') || {innerText: ''}).innerText.includes('connected')`, "the configured client, connected")
		b.shot("luci-status.png")
	})

	t.Run("engines", func(t *testing.T) {
		b.open(page("engines"), `document.querySelector('#offload-engines-table tr[data-engine="software"]')`)
		b.eval(`document.getElementById('offload-run-speed').click(), ''`)
		b.waitLong(`document.querySelector('#offload-speed-plot polyline[data-engine="software"]')`, "the speed plot", 180*time.Second)
		pts := b.eval(`document.querySelector('#offload-speed-plot polyline[data-engine="software"]').getAttribute('points')`)
		if n := len(strings.Fields(pts)); n != 6 {
			t.Errorf("software's line has %d points (%q), want one per block size (6)", n, pts)
		}
		// A saved run with a crossover: testdata/speed-amd64-vm.json
		// (testdata/README.md), loaded as a user would, through the
		// page's file input.
		run, err := os.ReadFile("testdata/speed-amd64-vm.json")
		if err != nil {
			t.Fatal(err)
		}
		b.eval(fmt.Sprintf(`(() => { const dt = new DataTransfer(); dt.items.add(new File([%q], 'speed.json'));
			const i = document.getElementById('offload-speed-file'); i.files = dt.files; i.dispatchEvent(new Event('change')); return '' })()`, run))
		b.wait(`document.querySelector('#offload-speed-plot .offload-crossover[data-engine="afalg"]')`, "the crossover of afalg in the saved run")
		got, _ := strconv.Atoi(b.eval(`document.querySelector('#offload-speed-plot .offload-crossover[data-engine="afalg"]').getAttribute('data-size')`))
		want := crossover(t, run, "afalg")
		if got != want || got <= 1024 || got >= 4096 {
			t.Errorf("afalg's crossover drawn at %d bytes, want %d (between 1 KiB and 4 KiB, where the run's lines cross)", got, want)
		}
		if n := b.eval(`document.querySelectorAll('#offload-speed-plot .offload-crossover').length`); n != "1" {
			t.Errorf("%s crossover marks, want 1 (virtio_crypto never beats software in this run)", n)
		}
		b.shot("luci-engines-crossover.png")
	})

	t.Run("client role", func(t *testing.T) {
		// The other role's sections: role set to client and saved (staged,
		// not applied), the page shows the client and its forward,
		// UDP forward and reverse tables; then the change is reverted.
		before := e.read("etc/config/offload")
		b.open(page("settings"), `document.querySelector('#cbi-offload-main-role select')`)
		b.eval(`(() => { const n = document.querySelector('#cbi-offload-main-role select'); n.value = 'client';
			n.dispatchEvent(new Event('change', {bubbles: true})); return '' })()`)
		b.eval(`document.querySelector('.cbi-page-actions .cbi-button-save').click(), ''`)
		b.wait(`document.querySelector('[data-indicator="uci-changes"]') || document.body.innerText.match(/unsaved changes: [1-9]/i)`, "the staged role change")
		b.open(page("settings"), `document.getElementById('cbi-offload-forward') && document.getElementById('cbi-offload-udp_forward') && document.getElementById('cbi-offload-reverse')`)
		if n := b.eval(`document.querySelectorAll('#cbi-offload-service, #cbi-offload-peer').length`); n != "0" {
			t.Errorf("the client's page shows %s server sections", n)
		}
		b.eval(`window.offloadReverted = false, L.require('request').then(r => r.request(L.url('admin/uci/revert'),
			{ method: 'post', query: { sid: L.env.sessionid, token: L.env.token } })).then(r => window.offloadReverted = r.status), ''`)
		b.wait(`window.offloadReverted`, "the revert")
		if e.read("etc/config/offload") != before {
			t.Fatal("Save (without Apply) changed /etc/config/offload")
		}
	})

	t.Run("keygen", func(t *testing.T) {
		old := strings.TrimSpace(e.read("etc/offload/offload.key"))
		b.open(page("settings"), `document.getElementById('offload-keygen')`)
		oldFP := b.eval(`document.getElementById('offload-key-fingerprint').textContent`)
		b.eval(`window.confirm = () => true, document.getElementById('offload-keygen').click(), ''`)
		b.wait(fmt.Sprintf(`document.getElementById('offload-key-fingerprint').textContent != %q`, oldFP), "a new fingerprint")
		now := strings.TrimSpace(e.read("etc/offload/offload.key"))
		if now == old {
			t.Fatal("the key file did not change")
		}
		want := strings.TrimSpace(e.mustChroot("/usr/bin/offload", "keygen", "-fingerprint", "/etc/offload/offload.key"))
		if got := b.eval(`document.getElementById('offload-key-fingerprint').textContent`); got != want {
			t.Fatalf("fingerprint shown %q, file's %q", got, want)
		}
		if html := b.eval(`document.documentElement.outerHTML`); strings.Contains(html, now[:16]) {
			t.Fatal("the page holds the new key")
		}
	})

	t.Run("client status", func(t *testing.T) {
		// The router turned client: its server stopped (Status says
		// offload is not running), then /etc/config/offload names a
		// server on this host with the router's (new) key, and Status
		// shows the client's side: the server it dials, its link and the
		// forward's streams.
		e.mustChroot("/etc/init.d/offload", "stop")
		b.open(page("status"), `document.getElementById('offload-down')`)
		srv2, fwd2 := freePort(t), freePort(t)
		sdir := t.TempDir()
		e.run("cp", filepath.Join(e.root, "etc/offload/offload.key"), filepath.Join(sdir, "offload.key"))
		os.WriteFile(filepath.Join(sdir, "server.yaml"), []byte(fmt.Sprintf(
			"listen: 127.0.0.1:%d\nkey_file: offload.key\ncontrol: off\nservices:\n  echo: 127.0.0.1:%d\n", srv2, one)), 0o600)
		server := testutil.StartProc(t, "offload server (host)", e.bin, "server", "-c", filepath.Join(sdir, "server.yaml"))
		e.write("etc/config/offload", fmt.Sprintf(`config offload 'main'
	option enabled '1'
	option role 'client'

config client 'client'
	option server '127.0.0.1:%d'
	option key_file 'offload.key'

config forward
	option listen '127.0.0.1:%d'
	option service 'echo'
`, srv2, fwd2), 0o600)
		e.mustChroot("/etc/init.d/offload", "start")
		fwd := fmt.Sprintf("127.0.0.1:%d", fwd2)
		waitFor(t, "the router's client carries a connection to backend-one", 60*time.Second, func() (bool, string) {
			got, err := banner(fwd)
			return got == "backend-one", fmt.Sprintf("%q %v; server log: %s", got, err, server.Out)
		})
		b.open(page("status"), `document.getElementById('offload-link-1-sent')`)
		about := b.eval(`document.getElementById('offload-about').innerText`)
		if !strings.Contains(about, "client") || !strings.Contains(about, fmt.Sprintf("127.0.0.1:%d", srv2)) {
			t.Errorf("the client's status says:\n%s", about)
		}
		b.shot("luci-status-client.png")
	})
}

// crossover is where the engine's throughput rises above software's in an
// offload speed -json run: between the last size where it is below and
// the first where it is above, interpolated on log2(size) against
// log(ratio), as the page marks it.
func crossover(t *testing.T, run []byte, engine string) int {
	var r struct {
		Engines []struct {
			Engine  string
			Results []struct {
				Size, Ops int64
				Elapsed   int64 `json:"elapsed_ns"`
			}
		}
	}
	if err := json.Unmarshal(run, &r); err != nil {
		t.Fatal(err)
	}
	mbps := map[string]map[int64]float64{}
	var sizes []int64
	for _, e := range r.Engines {
		mbps[e.Engine] = map[int64]float64{}
		for _, x := range e.Results {
			mbps[e.Engine][x.Size] = float64(x.Ops*x.Size) / float64(x.Elapsed) * 1e3
			if e.Engine == engine {
				sizes = append(sizes, x.Size)
			}
		}
	}
	d := func(s int64) float64 { return math.Log(mbps[engine][s] / mbps["software"][s]) }
	for i := 1; i < len(sizes); i++ {
		if d(sizes[i-1]) <= 0 && d(sizes[i]) > 0 {
			f := d(sizes[i-1]) / (d(sizes[i-1]) - d(sizes[i]))
			l0, l1 := math.Log2(float64(sizes[i-1])), math.Log2(float64(sizes[i]))
			return int(math.Round(math.Pow(2, l0+f*(l1-l0))))
		}
	}
	t.Fatalf("%s never crosses software in the run", engine)
	return 0
}

func (e *env) mustChroot(args ...string) string {
	e.t.Helper()
	out, err := e.chroot(args...)
	if err != nil {
		e.t.Fatalf("chroot %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// transfer writes through the forward until stop.
func transfer(addr string, stop *atomic.Bool) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 32<<10)
	for !stop.Load() {
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(buf); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond) // a steady trickle, not a flood
	}
	return nil
}

// browser is one headless chromium tab.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

func newBrowser(t *testing.T) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath("/usr/bin/chromium"),
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			t.Logf("browser console: %s (%s)", m.String(), m.URL)
		}
	}()
	return &browser{t: t, ctx: ctx, shots: os.Getenv("OFFLOAD_LUCI_SCREENSHOTS")}
}

func (b *browser) open(url, ready string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("open %s: %v", url, err)
	}
	b.wait(ready, "the page "+url)
}

func (b *browser) wait(expr, what string) { b.t.Helper(); b.waitLong(expr, what, 90*time.Second) }

func (b *browser) waitLong(expr, what string, limit time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, limit+10*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[any](expr, chromedp.WithPollingTimeout(limit), chromedp.WithPollingInterval(200*time.Millisecond))); err != nil {
		body := b.eval(`document.getElementById('maincontent') ? document.getElementById('maincontent').innerText : document.body.innerText`)
		b.t.Fatalf("waiting for %s (%s): %v\npage text:\n%s", what, expr, err, body)
	}
}

func (b *browser) eval(expr string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		var ee *chromedp.ExceptionError
		if errors.As(err, &ee) {
			b.t.Fatalf("%s: %v", expr, err)
		}
		b.t.Fatalf("eval %s: %v", expr, err)
	}
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// setInput types a value into a LuCI text field as a user would: focus,
// value, input and change events, blur.
func (b *browser) setInput(sel, value string) {
	b.t.Helper()
	b.eval(fmt.Sprintf(`(() => { const n = document.querySelector(%q); n.focus(); n.value = %q;
		n.dispatchEvent(new Event('input', {bubbles: true})); n.dispatchEvent(new Event('change', {bubbles: true}));
		n.dispatchEvent(new Event('blur', {bubbles: true})); return '' })()`, sel, value))
}

// saveApply presses the page's Save & Apply.
func (b *browser) saveApply() {
	b.t.Helper()
	b.wait(`document.querySelector('.cbi-page-actions .cbi-button-apply')`, "the Save & Apply button")
	b.eval(`document.querySelector('.cbi-page-actions .cbi-button-apply').click(), ''`)
}

func (b *browser) shot(name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	// The whole page from its top (LuCI's header bar is fixed: it is
	// drawn where the window is), the document's height, not the window's.
	b.eval(`window.scrollTo(0, 0), ''`)
	h, err := strconv.ParseFloat(b.eval(`String(Math.max(document.documentElement.scrollHeight, document.body.scrollHeight))`), 64)
	if err != nil {
		b.t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Format:                page.CaptureScreenshotFormatPng,
			Clip:                  &page.Viewport{Width: 1280, Height: h, Scale: 1},
			CaptureBeyondViewport: ptr(true),
		})
		return r.Data, err
	})
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}
