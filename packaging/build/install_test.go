package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// The install test meets the real package managers: OpenWrt's opkg (24.10)
// and apk-tools v3 (25.12), with OpenWrt's real uci, built from the
// fixtures by build-openwrt-userland.sh into OFFLOAD_OWRT_ROOT (scripts/
// test.sh's openwrt-pkg stage does that). Into an empty staging root,
// offline, as an image build does (IPKG_INSTROOT set: no service start),
// for each format: install; files, modes and owners; the rc.d links; the
// uci-defaults firewall rule for a server and none for a client; the
// version the binary names; check-init.sh on the installed init script
// and UCI file (with OFFLOAD_UCI_PREFIX, build-uci.sh's); an upgrade to a
// newer build keeps a changed /etc/config/offload; removal takes out the
// rc.d links, the firewall rule and every file but the conffiles.
//
// Without OFFLOAD_OWRT_ROOT it skips, saying so; the openwrt-pkg stage sets
// it, and fails under CI=true when the fixtures are missing.
func TestInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds packages and installs them")
	}
	owrt := os.Getenv("OFFLOAD_OWRT_ROOT")
	if owrt == "" {
		t.Skip(`needs OpenWrt's opkg, apk and uci (OFFLOAD_OWRT_ROOT): OFFLOAD_STAGES="deps openwrt-pkg" bash scripts/test.sh builds them from the fixtures and runs this test`)
	}
	for _, p := range []string{"usr/bin/opkg-cl", "usr/bin/apk", "usr/bin/uci"} {
		if _, err := os.Stat(filepath.Join(owrt, p)); err != nil {
			t.Fatalf("OFFLOAD_OWRT_ROOT (build-openwrt-userland.sh's root): %v", err)
		}
	}
	if os.Getenv("OFFLOAD_UCI_PREFIX") == "" {
		t.Fatal("no OFFLOAD_UCI_PREFIX (what packaging/openwrt/build-uci.sh prints): check-init.sh and the procd stand-ins need it")
	}
	inRoot(t)
	versionOrder(t, owrt)
	ctx := context.Background()
	x86 := targets[len(targets)-1]
	dist := [2]string{t.TempDir(), t.TempDir()}
	tr, err := readTree(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := splitRelease(tr.Version)
	versions := [2]string{"", v1 + "-r2"} // the tree's, then a newer build of it
	for i := range dist {
		o := &options{out: dist[i], arches: []target{x86}, formats: map[string]bool{"ipk": true, "apk": true}, version: versions[i]}
		var stderr bytes.Buffer
		if err := build(ctx, o, io.Discard, &stderr); err != nil {
			t.Fatalf("build: %v\n%s", err, stderr.String())
		}
	}
	versions[0] = tr.Describe
	for _, format := range []string{"ipk", "apk"} {
		t.Run(format, func(t *testing.T) {
			pkgs := [2]string{}
			for i := range pkgs {
				m, _ := filepath.Glob(filepath.Join(dist[i], x86.Arch, "*."+format))
				if len(m) != 1 {
					t.Fatalf("build wrote %v, want one .%s", m, format)
				}
				pkgs[i] = m[0]
			}
			installTest(t, owrt, format, pkgs, versions)
		})
	}
}

// stage is an empty root that a package manager installs into.
type stage struct {
	t      *testing.T
	owrt   string
	root   string
	format string
}

// env is what OpenWrt's scripts see in an image build.
func (s *stage) env() []string {
	return append(os.Environ(), "IPKG_INSTROOT="+s.root, "LD_LIBRARY_PATH="+filepath.Join(s.owrt, "usr/lib"),
		"PATH="+filepath.Join(s.owrt, "usr/bin")+":"+os.Getenv("PATH"))
}

func (s *stage) run(name string, args ...string) string {
	s.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = s.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// pm runs the package manager: opkg-cl as the fixture README says (the
// lock folder, --force-postinstall: scripts run on the host with
// IPKG_INSTROOT), apk with --force-no-chroot --preserve-env for the same.
func (s *stage) pm(args ...string) string {
	s.t.Helper()
	if s.format == "ipk" {
		conf := filepath.Join(s.root, "..", "opkg.conf")
		if err := os.WriteFile(conf, []byte("dest root /\nlists_dir ext /var/opkg-lists\noption overlay_root /overlay\narch all 1\narch x86_64 10\n"), 0o644); err != nil {
			s.t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(s.root, "var/lock"), 0o755); err != nil {
			s.t.Fatal(err)
		}
		return s.run(filepath.Join(s.owrt, "usr/bin/opkg-cl"), append([]string{"-f", conf, "-o", s.root, "--force-postinstall"}, args...)...)
	}
	return s.run(filepath.Join(s.owrt, "usr/bin/apk"), append([]string{"--root", s.root, "--allow-untrusted", "--no-network", "--force-no-chroot", "--preserve-env"}, args...)...)
}

func (s *stage) uci(args ...string) string {
	s.t.Helper()
	return strings.TrimSpace(s.run(filepath.Join(s.owrt, "usr/bin/uci"), append([]string{"-c", filepath.Join(s.root, "etc/config")}, args...)...))
}

// uciGet is uci -q ARGS, "" where uci finds nothing.
func (s *stage) uciGet(args ...string) string {
	cmd := exec.Command(filepath.Join(s.owrt, "usr/bin/uci"), append([]string{"-q", "-c", filepath.Join(s.root, "etc/config")}, args...)...)
	cmd.Env = s.env()
	out, _ := cmd.Output()
	return strings.TrimSpace(string(out))
}

func (s *stage) read(p string) string {
	b, err := os.ReadFile(filepath.Join(s.root, p))
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

func installTest(t *testing.T, owrt, format string, pkgs, versions [2]string) {
	s := &stage{t: t, owrt: owrt, root: filepath.Join(t.TempDir(), "root"), format: format}
	if err := os.MkdirAll(s.root, 0o755); err != nil {
		t.Fatal(err)
	}
	if format == "ipk" {
		s.pm("install", pkgs[0])
	} else {
		s.pm("add", "--initdb", pkgs[0])
	}

	// What a router needs, as OpenWrt's INSTALL_BIN and INSTALL_CONF make it.
	want := map[string]os.FileMode{"/usr/bin/offload": 0o755}
	for _, f := range pkgFiles {
		want[f.Dest] = f.Mode
	}
	for p, mode := range want {
		st, err := os.Lstat(filepath.Join(s.root, p))
		if err != nil {
			t.Errorf("installed: %v", err)
			continue
		}
		if !st.Mode().IsRegular() || st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want a file of mode %v", p, st.Mode(), mode)
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Getuid() == 0 && (sys.Uid != 0 || sys.Gid != 0) {
			t.Errorf("%s: owner %d:%d, want root", p, sys.Uid, sys.Gid)
		}
	}
	// Enabled as in an image build (rc.common's enable), not started: the
	// init script's run folder is not there.
	for _, l := range []string{"etc/rc.d/S95offload", "etc/rc.d/K10offload"} {
		if dst, err := os.Readlink(filepath.Join(s.root, l)); err != nil || dst != "../init.d/offload" {
			t.Errorf("%s: %q, %v; want a link to ../init.d/offload", l, dst, err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.root, "var/etc/offload")); err == nil {
		t.Error("the service was started in an image build (var/etc/offload exists)")
	}
	if out := s.run(filepath.Join(s.root, "usr/bin/offload"), "version"); !strings.HasPrefix(out, "offload "+versions[0]+" ") {
		t.Errorf("offload version: %q, want it to name %s", out, versions[0])
	}

	installedConf := s.read("etc/config/offload")

	// The uci-defaults script, as at first boot of the image: a firewall
	// rule for an enabled server only; idempotent.
	fw := "config defaults\n\toption input 'REJECT'\n\nconfig zone\n\toption name 'lan'\n\nconfig zone\n\toption name 'wan'\n\toption input 'REJECT'\n"
	if err := os.WriteFile(filepath.Join(s.root, "etc/config/firewall"), []byte(fw), 0o644); err != nil {
		t.Fatal(err)
	}
	uciDefaults := filepath.Join(s.root, "etc/uci-defaults/90_offload-firewall")
	noRule := func(why string) {
		t.Helper()
		s.run("sh", uciDefaults)
		if got := s.uciGet("show", "firewall.offload"); got != "" || strings.Contains(s.read("etc/config/firewall"), "offload") {
			t.Errorf("%s: firewall rule %q, want none", why, got)
		}
	}
	noRule("as shipped (disabled)")
	s.uci("set", "offload.main.enabled=1")
	s.uci("set", "offload.main.role=client")
	s.uci("commit", "offload")
	noRule("an enabled client")
	port := freePort(t)
	s.uci("set", "offload.main.role=server")
	s.uci("set", "offload.server.listen=127.0.0.1:"+port)
	s.uci("commit", "offload")
	s.run("sh", uciDefaults)
	first := s.read("etc/config/firewall")
	s.run("sh", uciDefaults)
	if again := s.read("etc/config/firewall"); again != first {
		t.Errorf("a second run changed the firewall config:\n%s\n---\n%s", first, again)
	}
	for opt, v := range map[string]string{"": "rule", "src": "wan", "proto": "tcp", "dest_port": port, "target": "ACCEPT"} {
		key := "firewall.offload"
		if opt != "" {
			key += "." + opt
		}
		if got := s.uciGet("get", key); got != v {
			t.Errorf("%s = %q, want %q", key, got, v)
		}
	}
	if n := strings.Count(first, "config rule"); n != 1 {
		t.Errorf("%d rules in the firewall config, want 1:\n%s", n, first)
	}
	changed := s.read("etc/config/offload")

	// check-init.sh on the installed init script and binary, and the UCI
	// file as the package installed it.
	{
		prefix := os.Getenv("OFFLOAD_UCI_PREFIX")
		conf := filepath.Join(t.TempDir(), "offload.config")
		if err := os.WriteFile(conf, []byte(installedConf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("busybox", "sh", "packaging/openwrt/check-init.sh", prefix, filepath.Join(s.root, "usr/bin/offload"))
		cmd.Env = append(os.Environ(), "OFFLOAD_CHECK_INIT="+filepath.Join(s.root, "etc/init.d/offload"), "OFFLOAD_CHECK_CONFIG="+conf)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("check-init.sh on the installed tree: %v\n%s", err, out)
		} else {
			t.Logf("check-init.sh on the installed tree: %s", lastLine(out))
		}
	}

	// Upgrade to the newer build: the changed /etc/config/offload stays.
	if format == "ipk" {
		s.pm("install", pkgs[1])
	} else {
		s.pm("add", pkgs[1])
	}
	if got := s.read("etc/config/offload"); got != changed {
		t.Errorf("the upgrade replaced the changed /etc/config/offload:\n%s", got)
	}
	if out := s.run(filepath.Join(s.root, "usr/bin/offload"), "version"); !strings.HasPrefix(out, "offload "+versions[1]+" ") {
		t.Errorf("after the upgrade offload version says %q, want %s", out, versions[1])
	}
	// The package manager's own view: the new version, the licence.
	var listed, licence string
	if format == "ipk" {
		listed, licence = s.pm("info", "offload")+s.read("usr/lib/opkg/info/offload.control"), "License: Apache-2.0"
	} else {
		listed, licence = s.pm("list", "-I", "offload"), "(Apache-2.0)"
	}
	if !strings.Contains(listed, versions[1]) || !strings.Contains(listed, licence) {
		t.Errorf("after the upgrade the package manager says %q, want %s and %s", listed, versions[1], licence)
	}

	// Removal on a running router: in a chroot of the stage (as root),
	// with the server running under the procd stand-ins, the package
	// manager's removal must stop it; the rc.d links, the firewall rule
	// and every file but the conffiles go.
	pid := s.startLive(t)
	s.removeInRouter()
	if alive(pid) {
		t.Errorf("removal left the running server (pid %d) running", pid)
	}
	if got := s.read("etc/config/offload"); got != changed {
		t.Errorf("removal changed the conffile /etc/config/offload:\n%s", got)
	}
	if got := s.uciGet("show", "firewall.offload"); got != "" {
		t.Errorf("removal left the firewall rule: %s", got)
	}
	left := []string{"etc/rc.d/S95offload", "etc/rc.d/K10offload", "usr/bin/offload", "etc/init.d/offload", "usr/libexec/offload-firewall", "etc/uci-defaults/90_offload-firewall"}
	for _, p := range left {
		if _, err := os.Lstat(filepath.Join(s.root, p)); err == nil {
			t.Errorf("removal left %s", p)
		}
	}

	// Install on the running router (the chroot, no IPKG_INSTROOT), as
	// opkg install / apk add there: the postinst runs the uci-defaults
	// script at once (the kept config is an enabled server: the rule is
	// back, the script gone) and starts the service. Then the upgrade
	// there restarts it on the new binary.
	add := func(pkg string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(s.root, "tmp", filepath.Base(pkg)), mustRead(t, pkg), 0o644); err != nil {
			t.Fatal(err)
		}
		in := "/tmp/" + filepath.Base(pkg)
		if format == "ipk" {
			s.inRouter("/usr/bin/opkg-cl", "-f", "/etc/opkg-test.conf", "install", in)
		} else {
			s.inRouter("/usr/bin/apk", "--no-network", "--allow-untrusted", "--preserve-env", "add", in)
		}
	}
	add(pkgs[0])
	pid = s.waitListening(t, 2)
	if got := s.uciGet("get", "firewall.offload.dest_port"); got != port {
		t.Errorf("install on a router: firewall.offload.dest_port %q, want %s", got, port)
	}
	if _, err := os.Stat(uciDefaults); err == nil {
		t.Error("install on a router: the uci-defaults script is still there after it ran")
	}
	add(pkgs[1])
	newPid := s.waitListening(t, 3)
	if newPid == pid || alive(pid) {
		t.Errorf("the upgrade on a router: server pid %d (was %d, alive %v); want a new process on the new binary", newPid, pid, alive(pid))
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", newPid)); err != nil || exe != filepath.Join(s.root, "usr/bin/offload") {
		t.Errorf("the upgraded server runs %q (%v), want the stage's usr/bin/offload", exe, err)
	}
	s.removeInRouter()
	if alive(newPid) {
		t.Errorf("the second removal left the server (pid %d) running", newPid)
	}
}

// versionOrder: the package versions packageVersion makes order the same
// way for the real opkg and apk: a later commit, a tag after untagged
// commits, commits after a tag, a newer release.
func versionOrder(t *testing.T, owrt string) {
	at := time.Date(2026, 12, 7, 3, 4, 5, 0, time.UTC)
	var seq []string
	for _, c := range []struct {
		long string
		at   time.Time
	}{
		{"536020900077", at},
		{"0abc12345678-dirty", at.Add(time.Second)},
		{"v1.0.0-0-g0abc12345678", at},
		{"v1.0.0-3-g0abc12345678", at},
		{"v1.0.0-4-g00bc12345678", at},
		{"v1.0.1-0-g00bc12345678", at},
	} {
		v, err := packageVersion(c.long, c.at)
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, v)
	}
	v, _ := splitRelease(seq[len(seq)-1])
	seq = append(seq, v+"-r2")
	env := append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Join(owrt, "usr/lib"))
	conf := filepath.Join(t.TempDir(), "opkg.conf")
	if err := os.WriteFile(conf, []byte("dest root /\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(seq); i++ {
		a, b := seq[i-1], seq[i]
		cmd := exec.Command(filepath.Join(owrt, "usr/bin/apk"), "version", "-t", a, b)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != "<" {
			t.Errorf("apk version -t %s %s: %q, %v; want <", a, b, out, err)
		}
		cmd = exec.Command(filepath.Join(owrt, "usr/bin/opkg-cl"), "-f", conf, "compare-versions", a, "<<", b)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("opkg compare-versions %s '<<' %s: %v %s", a, b, err, out)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startLive makes the stage a router one can chroot into (busybox, uci,
// the package manager, the procd and rc.common stand-ins of
// packaging/openwrt/test) and starts offload there with
// /etc/init.d/offload start, as procd would: it returns the server's pid
// once it listens.
func (s *stage) startLive(t *testing.T) int {
	t.Helper()
	if os.Getuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("removal on a running router needs root (chroot)")
		}
		t.Skip("not root: no chroot for the removal on a running router")
	}
	uciPrefix := os.Getenv("OFFLOAD_UCI_PREFIX")
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("no busybox (busybox-static)")
	}
	cp := func(src, dst string, mode os.FileMode) {
		t.Helper()
		b, err := os.ReadFile(src)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(filepath.Join(s.root, dst)), 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(s.root, dst), b, mode)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cp(bb, "/bin/busybox", 0o755)
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range strings.Fields(string(list)) {
		_ = os.Symlink("busybox", filepath.Join(s.root, "bin", a)) // (some exist)
	}
	for _, b := range []string{"/usr/bin/uci", "/usr/bin/opkg-cl", "/usr/bin/apk"} {
		cp(filepath.Join(s.owrt, b), b, 0o755)
		ldd := exec.Command("ldd", filepath.Join(s.owrt, b))
		ldd.Env = s.env()
		out, err := ldd.Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", b, err)
		}
		for _, f := range strings.Fields(string(out)) {
			if !strings.HasPrefix(f, "/") {
				continue
			}
			cp(f, strings.TrimPrefix(f, s.owrt), 0o755)
		}
	}
	for _, f := range []string{"rc.common", "functions.sh", "procd.sh"} {
		cp(filepath.Join("packaging/openwrt/test", f), "/etc/"+f, 0o644)
	}
	cp(filepath.Join(uciPrefix, "share/uci.sh"), "/usr/share/offload-test/share/uci.sh", 0o644)
	if err := os.WriteFile(filepath.Join(s.root, "etc/opkg-test.conf"), []byte("dest root /\nlists_dir ext /var/opkg-lists\narch all 1\narch x86_64 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.root, "tmp/procd"), 0o755); err != nil {
		t.Fatal(err)
	}
	// /dev/null, which shell redirections need (1, 3: its device numbers).
	if err := os.MkdirAll(filepath.Join(s.root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(s.root, "dev/null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatalf("mknod dev/null: %v", err)
	}
	s.run(filepath.Join(s.root, "usr/bin/offload"), "keygen", "-o", filepath.Join(s.root, "etc/offload/offload.key"))
	s.inRouter("/etc/init.d/offload", "start")
	return s.waitListening(t, 1)
}

// waitListening waits until the server's log says "listening" n times (a
// bounded wait for that event, generous for a busy machine) and returns
// its pid.
func (s *stage) waitListening(t *testing.T, n int) int {
	t.Helper()
	pidFile, log := filepath.Join(s.root, "tmp/procd/server.pid"), filepath.Join(s.root, "tmp/procd/server.log")
	for i := 0; ; i++ {
		b, _ := os.ReadFile(log)
		if bytes.Count(b, []byte("listening")) >= n {
			break
		}
		if i == 600 {
			t.Fatalf("the server started by /etc/init.d/offload start does not listen after 60 s: %s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !alive(pid) {
		t.Fatalf("server pid %q: %v", b, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// inRouter runs a command in the chroot, as on a router: no IPKG_INSTROOT.
func (s *stage) inRouter(args ...string) string {
	s.t.Helper()
	cmd := exec.Command("chroot", append([]string{s.root}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LD_LIBRARY_PATH=/usr/lib:/lib/x86_64-linux-gnu",
		"OFFLOAD_UCI=/usr/share/offload-test", "PROCD_DIR=/tmp/procd", "PROCD_LIVE=1", "HOME=/tmp"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("chroot %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// removeInRouter removes the package with the package manager running in
// the chroot. (apk's --preserve-env: the procd stand-ins find their state
// through the environment; a router's procd needs none.)
func (s *stage) removeInRouter() {
	s.t.Helper()
	if s.format == "ipk" {
		s.inRouter("/usr/bin/opkg-cl", "-f", "/etc/opkg-test.conf", "remove", "offload")
	} else {
		s.inRouter("/usr/bin/apk", "--no-network", "--preserve-env", "del", "offload")
	}
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// freePort is a free loopback port, drawn from below the ephemeral range
// (testutil.FreeAddr), where no other test's connection takes it first.
func freePort(t *testing.T) string {
	_, p, _ := net.SplitHostPort(testutil.FreePort(t))
	return p
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
