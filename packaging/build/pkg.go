package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/apk"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/goreleaser/nfpm/v2/ipk"
)

// file is one file a package installs, besides the binary.
type file struct {
	Dest string // absolute path on the router
	Src  string // path in the tree
	Mode os.FileMode
	// Conf marks a conffile: opkg keeps a changed one on upgrade and
	// removal; apk keeps it as a file under /etc it did not write.
	Conf bool
	// Only limits the file to one format ("apk").
	Only string
	data []byte
}

// The files of the package. Modes as OpenWrt's INSTALL_BIN (0755) and
// INSTALL_CONF (0600): the UCI file and the YAML may hold key paths and
// tokens.
var pkgFiles = []file{
	{Dest: "/etc/init.d/offload", Src: filesDir + "/offload.init", Mode: 0o755},
	{Dest: "/etc/config/offload", Src: filesDir + "/offload.config", Mode: 0o600, Conf: true},
	{Dest: "/etc/offload/server.yaml", Src: filesDir + "/server.yaml", Mode: 0o600, Conf: true},
	{Dest: "/etc/offload/client.yaml", Src: filesDir + "/client.yaml", Mode: 0o600, Conf: true},
	{Dest: "/usr/libexec/offload-firewall", Src: filesDir + "/offload.firewall", Mode: 0o755},
	{Dest: "/etc/uci-defaults/90_offload-firewall", Src: filesDir + "/offload.uci-defaults", Mode: 0o755},
}

// initOrder is START and STOP of the init script: the rc.d links that
// "enable" makes (S95offload, K10offload).
type initOrder struct{ Start, Stop string }

var (
	startRE = regexp.MustCompile(`(?m)^START=([0-9]+)$`)
	stopRE  = regexp.MustCompile(`(?m)^STOP=([0-9]+)$`)
)

// packageFiles reads the files from the tree, with the scripts made from
// them.
func packageFiles(t *tree) ([]file, error) {
	out := make([]file, 0, len(pkgFiles)+1)
	var order initOrder
	for _, f := range pkgFiles {
		data, err := os.ReadFile(filepath.Join(t.Root, f.Src))
		if err != nil {
			return nil, err
		}
		f.data = data
		if f.Dest == "/etc/init.d/offload" {
			s, p := startRE.FindSubmatch(data), stopRE.FindSubmatch(data)
			if s == nil || p == nil {
				return nil, fmt.Errorf("%s: no START=NN or STOP=NN line", f.Src)
			}
			order = initOrder{string(s[1]), string(p[1])}
		}
		out = append(out, f)
	}
	// What OpenWrt's apk packages carry: the conffiles, which sysupgrade
	// and apk's own tools read from /lib/apk/packages/NAME.conffiles.
	var conf strings.Builder
	for _, f := range out {
		if f.Conf {
			conf.WriteString(f.Dest + "\n")
		}
	}
	out = append(out, file{Dest: "/lib/apk/packages/offload.conffiles", Mode: 0o644, Only: "apk", data: []byte(conf.String())})
	for i := range out {
		out[i].data = bytes.ReplaceAll(out[i].data, []byte("\r\n"), []byte("\n"))
	}
	scripts = map[string][]byte{}
	for name, upgrade := range map[string]string{"postinst": "${PKG_UPGRADE:-0}", "post-install": "0", "post-upgrade": "1"} {
		scripts[name] = render(postinstTmpl, map[string]any{"Order": order, "Upgrade": upgrade, "Name": name})
	}
	scripts["prerm"] = render(prermTmpl, map[string]any{"Order": order})
	return out, nil
}

var scripts map[string][]byte

func render(tmpl *template.Template, data any) []byte {
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		panic(err) // the templates are constants
	}
	return b.Bytes()
}

// postinstTmpl does what OpenWrt's default_postinst does for a package
// with an init script and uci-defaults: in an image being built
// (IPKG_INSTROOT set) it only enables the service (the rc.d links); on a
// router it also runs the uci-defaults script at once and starts the
// service (restarts it after an upgrade, so the new binary runs). The init
// script starts nothing while /etc/config/offload says enabled 0.
var postinstTmpl = template.Must(template.New("postinst").Parse(`#!/bin/sh
# offload {{.Name}}: as OpenWrt's default_postinst.
[ "${IPKG_NO_SCRIPT:-}" = 1 ] && exit 0
root=${IPKG_INSTROOT:-}
upgrade={{.Upgrade}}
if [ "$upgrade" != 1 ]; then
	mkdir -p "$root/etc/rc.d"
	ln -sf ../init.d/offload "$root/etc/rc.d/S{{.Order.Start}}offload"
	ln -sf ../init.d/offload "$root/etc/rc.d/K{{.Order.Stop}}offload"
fi
if [ -z "$root" ]; then
	if [ -f /etc/uci-defaults/90_offload-firewall ]; then
		(cd /etc/uci-defaults && . ./90_offload-firewall) && rm -f /etc/uci-defaults/90_offload-firewall
	fi
	if [ "$upgrade" = 1 ]; then
		/etc/init.d/offload restart
	else
		/etc/init.d/offload start
	fi
fi
if [ ! -e "$root/dev/crypto" ]; then
	echo "offload: for a SoC's crypto engine through /dev/crypto, install kmod-cryptodev (see offload engines)"
fi
exit 0
`))

// prermTmpl is default_prerm's part for an init script: on a router it
// stops the service; in both cases it disables it and takes out the
// firewall rule offload-firewall set.
var prermTmpl = template.Must(template.New("prerm").Parse(`#!/bin/sh
# offload prerm: as OpenWrt's default_prerm.
[ "${IPKG_NO_SCRIPT:-}" = 1 ] && exit 0
root=${IPKG_INSTROOT:-}
[ -n "$root" ] || /etc/init.d/offload stop
rm -f "$root/etc/rc.d/S{{.Order.Start}}offload" "$root/etc/rc.d/K{{.Order.Stop}}offload"
"$root/usr/libexec/offload-firewall" remove
exit 0
`))

const description = `Encrypted TCP tunnel that offloads AES to kernel crypto drivers.
offload carries many TCP connections over one encrypted link between two
routers and sends each frame's AES to the fastest engine: Go's software
AES, AF_ALG or /dev/crypto (kmod-cryptodev, suggested), e.g. the EIP-93 of
an MT7621. "offload engines" shows which driver serves each engine.`

// writePackage packs one target's binary and the files into an ipk or apk
// under out/ARCH/ and returns its path.
func writePackage(t *tree, a target, format, bin string, fl []file, work, out string) (string, error) {
	// nfpm reads sources from disk (and takes a script's mtime from its
	// file): write each with the commit's time.
	src := filepath.Join(work, format)
	contents := files.Contents{{
		Source: bin, Destination: "/usr/bin/offload",
		FileInfo: &files.ContentFileInfo{Mode: 0o755, MTime: t.Time, Owner: "root", Group: "root"},
	}}
	for i, f := range fl {
		if f.Only != "" && f.Only != format {
			continue
		}
		p := filepath.Join(src, "f", fmt.Sprint(i))
		if err := writeStamped(p, f.data, t); err != nil {
			return "", err
		}
		typ := files.TypeFile
		if f.Conf {
			typ = files.TypeConfig
		}
		contents = append(contents, &files.Content{
			Source: p, Destination: f.Dest, Type: typ,
			FileInfo: &files.ContentFileInfo{Mode: f.Mode, MTime: t.Time, Owner: "root", Group: "root"},
		})
	}
	script := func(name string) (string, error) {
		p := filepath.Join(src, "scripts", name)
		return p, writeStamped(p, scripts[name], t)
	}
	info := &nfpm.Info{
		Name:        pkgName,
		Arch:        a.Arch,
		Platform:    "linux",
		Version:     t.Version,
		Section:     "net",
		Priority:    "optional",
		Maintainer:  maintainer,
		Description: description,
		Homepage:    homepage,
		License:     license,
		MTime:       t.Time,
	}
	info.Overridables = nfpm.Overridables{Contents: contents}
	var packager nfpm.Packager
	var name string
	var err error
	switch format {
	case "ipk":
		packager, name = ipk.Default, fmt.Sprintf("%s_%s_%s.ipk", pkgName, t.Version, a.Arch)
		info.Suggests = []string{"kmod-cryptodev"}
		if info.Scripts.PostInstall, err = script("postinst"); err != nil {
			return "", err
		}
		if info.Scripts.PreRemove, err = script("prerm"); err != nil {
			return "", err
		}
	case "apk":
		// apk has no "suggests": the description and the post-install
		// message say it.
		packager, name = apk.Default, fmt.Sprintf("%s-%s.apk", pkgName, t.Version)
		info.APK.Arch = a.Arch
		if info.Scripts.PostInstall, err = script("post-install"); err != nil {
			return "", err
		}
		if info.APK.Scripts.PostUpgrade, err = script("post-upgrade"); err != nil {
			return "", err
		}
		if info.Scripts.PreRemove, err = script("prerm"); err != nil {
			return "", err
		}
	}
	// Version and release as nfpm joins them again (both formats write
	// VERSION-rN); VersionSchema none: no semver parsing of ours.
	info.Version, info.Release = splitRelease(t.Version)
	info.VersionSchema = "none"
	var b bytes.Buffer
	if err := packager.Package(nfpm.WithDefaults(info), &b); err != nil {
		return "", err
	}
	path := filepath.Join(out, a.Arch, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, b.Bytes(), 0o644)
}

// splitRelease splits "1.2.0-r1" into "1.2.0" and "r1".
func splitRelease(v string) (string, string) {
	if i := strings.LastIndex(v, "-r"); i > 0 {
		return v[:i], v[i+1:]
	}
	return v, ""
}

func writeStamped(p string, data []byte, t *tree) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return err
	}
	return os.Chtimes(p, t.Time, t.Time)
}
