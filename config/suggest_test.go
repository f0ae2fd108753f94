package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
)

// A misspelt field or enumerated value gets a "did you mean" with the
// nearest known name; one far from every name gets none, and the error
// still wraps its cause.
func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"field", goodServer + "max_stream: 10\n", `6: max_stream: unknown field; did you mean "max_streams"?`},
		{"swapped letters", goodServer + "mxa_frame: 16KiB\n", `did you mean "max_frame"?`},
		{"nested field", goodServer + "log: {levl: debug}\n", `log.levl: unknown field; did you mean "level"?`},
		{"suite", goodServer + "suite: aes-256-ctr-hmac-sha265\n", `suite: unknown suite "aes-256-ctr-hmac-sha265"; did you mean "aes-256-ctr-hmac-sha256"?`},
		{"engine", goodServer + "engine: sofware\n", `engine: unknown engine "sofware"; did you mean "software"?`},
		{"engine with a driver", goodServer + "engine: afalgg:safexcel\n", `did you mean "afalg:safexcel"?`},
		{"engine case", goodServer + "engine: AUTO\n", `did you mean "auto"?`},
		{"log level", goodServer + "log: {level: wran}\n", `did you mean "warn"?`},
		{"log format", goodServer + "log: {format: jsno}\n", `did you mean "json"?`},
		{"client field", goodClient + "redail: {min: 1s}\n", `redail: unknown field; did you mean "redial"?`},
	} {
		_, err := Parse("s.yaml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct{ name, src string }{
		{"field", goodServer + "colour: blue\n"},
		{"engine", goodServer + "engine: openssl\n"},
		{"suite", goodServer + "suite: chacha20\n"},
	} {
		_, err := Parse("s.yaml", []byte(tc.src))
		if err == nil || strings.Contains(err.Error(), "did you mean") {
			t.Errorf("%s: got %v, want an error with no suggestion", tc.name, err)
		}
	}
	_, err := Parse("s.yaml", []byte(goodServer+"engine: sofware\n"))
	if !errors.Is(err, engine.ErrUnknownEngine) {
		t.Errorf("a suggestion hides the cause: %v", err)
	}
}

func TestDidYouMeanClientServices(t *testing.T) {
	src := "listen: :7000\nservices: {web: 'a:1', ssh: 'a:22'}\nclients:\n  a: {key_file: a.key, services: [wbe]}\n"
	_, err := ParseServer("s.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), `clients.a.services[0]: "wbe" is not one of the server's services or udp_services; did you mean "web"?`) {
		t.Errorf("got %v", err)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"ab", "ba", 1}, {"max_frame", "mxa_frame", 1}, {"héllo", "hello", 1}} {
		if got := editDistance(tc.a, tc.b); got != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}
