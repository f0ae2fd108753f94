package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionStamped: a version stamped with -X main.buildVersion (the
// packaging command's) is what offload version and the reports name,
// whatever the build info says; without one, the VCS revision.
func TestVersionStamped(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"},
	}}
	if got := versionOf(bi); got != "devel-0123456789ab+dirty" {
		t.Errorf("unstamped: %q, want devel-0123456789ab+dirty", got)
	}
	old := buildVersion
	t.Cleanup(func() { buildVersion = old })
	buildVersion = "v1.2.0-3-gabcdef123456"
	for _, b := range []*debug.BuildInfo{bi, nil} {
		if got := versionOf(b); got != buildVersion {
			t.Errorf("stamped, build info %v: %q, want %q", b != nil, got, buildVersion)
		}
	}
	var out strings.Builder
	printVersion(&out, bi)
	if !strings.HasPrefix(out.String(), "offload v1.2.0-3-gabcdef123456 ") {
		t.Errorf("offload version printed %q", out.String())
	}
}
