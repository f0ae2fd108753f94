package main

import (
	"slices"
	"testing"
)

// TestParseLibDepends keeps real library packages (lib*, zlib1g) and drops
// virtual ones, programs and the architecture qualifier.
func TestParseLibDepends(t *testing.T) {
	out := `openssh-server:mipsel
  PreDepends: <init-system-helpers:mipsel>
  Depends: <adduser:mipsel>
  Depends: libpam-modules:mipsel
  Depends: openssh-client:mipsel
 |Depends: <debconf:mipsel>
  Depends: libssl3:mipsel
  Depends: libwrap0:mipsel
  Depends: zlib1g:mipsel
  Depends: libssl3:mipsel
  Recommends: libpam-systemd:mipsel
`
	got := parseLibDepends(out)
	want := []string{"libpam-modules", "libssl3", "libwrap0", "zlib1g"}
	if !slices.Equal(got, want) {
		t.Fatalf("parseLibDepends = %q, want %q", got, want)
	}
}
