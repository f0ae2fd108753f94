package config

import (
	"strings"
	"testing"

	"github.com/offload-dev/offload/tunnel/control"
)

// control: off means none, a relative path is the config's directory's,
// an empty one is refused at its line; the default names the config.
func TestControlSetting(t *testing.T) {
	for _, tc := range []struct {
		line, want, err string
	}{
		{"", control.DefaultPath(ControlName("/etc/offload/client.yaml")), ""},
		{"control: off\n", "", ""},
		{"control: run/c.sock\n", "/etc/offload/run/c.sock", ""},
		{"control: /run/x.sock\n", "/run/x.sock", ""},
		{"control: \"\"\n", "", "control: is empty"},
	} {
		c, err := ParseClient("/etc/offload/client.yaml", []byte(goodClient+tc.line))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v; want %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil || c.Control != tc.want || c.ControlSet() != (tc.line != "") {
			t.Errorf("%q: control %q (set %v), %v; want %q", tc.line, c.Control, c.ControlSet(), err, tc.want)
		}
	}
	if a, b := ControlName("/a/server.yaml"), ControlName("/b/server.yaml"); a == b || !strings.HasPrefix(a, "server-") {
		t.Errorf("names %q and %q: want server-HASH, apart", a, b)
	}
}
