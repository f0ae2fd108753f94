package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/apk"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/goreleaser/nfpm/v2/ipk"

	"github.com/offload-dev/offload/tunnel/suite"
)

// luci-app-offload: the LuCI pages (packaging/openwrt/luci-app-offload:
// htdocs/ goes to /www, root/ to /, as OpenWrt's luci.mk installs them)
// and offload/schema.json, made here from the init script, so that the
// Settings page offers exactly the section types and options the init
// script renders. One package for every target: arch all (opkg) and
// noarch (apk), as LuCI's own.

const (
	luciName    = "luci-app-offload"
	luciDir     = "packaging/openwrt/luci-app-offload"
	schemaDest  = "/www/luci-static/resources/offload/schema.json"
	luciSummary = `LuCI pages for offload: settings, status and engines.
Settings edits /etc/config/offload with the options the init script
renders and checks them with offload validate before applying; Status
shows offload status; Engines lists the engines and plots offload speed.`
)

// luciSchema is schema.json: the section types of /etc/config/offload with
// their options (the init script's TYPES and OPTS_TYPE) and the suites
// offload knows.
type luciSchema struct {
	Types  map[string][]string `json:"types"`
	Order  []string            `json:"order"`
	Suites []string            `json:"suites"`
}

var (
	typesRE = regexp.MustCompile(`(?m)^TYPES="([^"]*)"$`)
	optsRE  = regexp.MustCompile(`(?m)^OPTS_([a-z_]+)="([^"]*)"$`)
)

// initSchema reads TYPES and the OPTS_* assignments of the init script,
// expanding $OPTS_x as the shell does (in order).
func initSchema(init []byte) (*luciSchema, error) {
	m := typesRE.FindSubmatch(init)
	if m == nil {
		return nil, fmt.Errorf("no TYPES=\"...\" line")
	}
	vars := map[string]string{}
	for _, a := range optsRE.FindAllSubmatch(init, -1) {
		name, val := string(a[1]), string(a[2])
		vars[name] = os.Expand(val, func(v string) string {
			return vars[strings.TrimPrefix(v, "OPTS_")]
		})
	}
	s := &luciSchema{Types: map[string][]string{}}
	for _, t := range strings.Fields(string(m[1])) {
		v, ok := vars[t]
		if !ok {
			return nil, fmt.Errorf("section type %s: no OPTS_%s", t, t)
		}
		s.Types[t] = strings.Fields(v)
		s.Order = append(s.Order, t)
	}
	for _, su := range suite.All() {
		s.Suites = append(s.Suites, su.String())
	}
	return s, nil
}

// luciFiles reads the app's files from the tree and makes schema.json.
func luciFiles(t *tree) ([]file, error) {
	var out []file
	for _, part := range []struct{ dir, dest string }{{"htdocs", "/www"}, {"root", "/"}} {
		base := filepath.Join(t.Root, luciDir, part.dir)
		err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(base, p)
			out = append(out, file{Dest: filepath.ToSlash(filepath.Join(part.dest, rel)), Src: p, Mode: 0o644, data: data})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	init, err := os.ReadFile(filepath.Join(t.Root, filesDir, "offload.init"))
	if err != nil {
		return nil, err
	}
	schema, err := initSchema(init)
	if err != nil {
		return nil, fmt.Errorf("%s/offload.init: %w", filesDir, err)
	}
	js, err := json.MarshalIndent(schema, "", "\t")
	if err != nil {
		return nil, err
	}
	out = append(out, file{Dest: schemaDest, Mode: 0o644, data: append(js, '\n')})
	sort.Slice(out, func(i, j int) bool { return out[i].Dest < out[j].Dest })
	return out, nil
}

// luciPostinst is what luci.mk's packages run after installing on a
// router: LuCI's menu and module caches are dropped, and rpcd reloads so
// that the new ACL counts. Nothing in an image being built.
const luciPostinst = `#!/bin/sh
[ -n "${IPKG_INSTROOT:-}" ] && exit 0
rm -f /tmp/luci-indexcache.* 2>/dev/null
rm -rf /tmp/luci-modulecache/ 2>/dev/null
killall -HUP rpcd 2>/dev/null
exit 0
`

// writeLuciPackage packs the app as an ipk (out/all/) or apk (out/noarch/),
// depending on luci-base and on offload of the same version.
func writeLuciPackage(t *tree, format string, fl []file, work, out string) (string, error) {
	src := filepath.Join(work, "luci-"+format)
	var contents files.Contents
	for i, f := range fl {
		p := filepath.Join(src, "f", fmt.Sprint(i))
		if err := writeStamped(p, f.data, t); err != nil {
			return "", err
		}
		contents = append(contents, &files.Content{
			Source: p, Destination: f.Dest, Type: files.TypeFile,
			FileInfo: &files.ContentFileInfo{Mode: f.Mode, MTime: t.Time, Owner: "root", Group: "root"},
		})
	}
	postinst := filepath.Join(src, "scripts", "postinst")
	if err := writeStamped(postinst, []byte(luciPostinst), t); err != nil {
		return "", err
	}
	info := &nfpm.Info{
		Name:        luciName,
		Platform:    "linux",
		Section:     "luci",
		Priority:    "optional",
		Maintainer:  maintainer,
		Description: luciSummary,
		Homepage:    homepage,
		License:     license,
		MTime:       t.Time,
	}
	info.Overridables = nfpm.Overridables{Contents: contents}
	info.Scripts.PostInstall = postinst
	var packager nfpm.Packager
	var name, dir string
	switch format {
	case "ipk":
		packager, dir = ipk.Default, "all"
		info.Arch = "all"
		name = fmt.Sprintf("%s_%s_all.ipk", luciName, t.Version)
		info.Depends = []string{"luci-base", fmt.Sprintf("%s (= %s)", pkgName, t.Version)}
	case "apk":
		packager, dir = apk.Default, "noarch"
		info.Arch, info.APK.Arch = "noarch", "noarch"
		name = fmt.Sprintf("%s-%s.apk", luciName, t.Version)
		info.Depends = []string{"luci-base", fmt.Sprintf("%s=%s", pkgName, t.Version)}
		// apk runs post-install only on a first install; an upgrade
		// changes the pages too.
		info.APK.Scripts.PostUpgrade = postinst
	default:
		return "", fmt.Errorf("format %q", format)
	}
	info.Version, info.Release = splitRelease(t.Version)
	info.VersionSchema = "none"
	var b bytes.Buffer
	if err := packager.Package(nfpm.WithDefaults(info), &b); err != nil {
		return "", err
	}
	path := filepath.Join(out, dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, b.Bytes(), 0o644)
}
