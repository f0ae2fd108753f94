package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that Parse never panics, that every error it returns is
// an Errors value whose entries all carry the file and a line, and that
// whatever it accepts is within the documented limits.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"server.yaml", "client.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "examples", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(goodServer))
	f.Add([]byte(goodClient))
	f.Add([]byte(goodServer + "log: {level: debug}\nmax_frame: 64KiB\n<<: *x\n"))
	f.Add([]byte("listen: &a ':1'\nkey_file: *a\nservices: {a: !!str 1}\n---\n"))
	f.Add([]byte("forwards:\n  - ? listen\n    : ':1'\n  - [x]\nredial: {min: 1s}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse("fuzz.yaml", data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %v (%T) is not a non-empty Errors", err, err)
			}
			for _, e := range es {
				if e.Line < 1 || e.File != "fuzz.yaml" || e.Msg == "" {
					t.Fatalf("error without file, line or message: %#v", e)
				}
			}
			if v != nil {
				t.Fatalf("Parse returned %T and an error", v)
			}
			return
		}
		var c *Common
		switch v := v.(type) {
		case *Server:
			c = &v.Common
			if len(v.Services) == 0 || v.Listen == "" {
				t.Fatalf("server without services or listen: %+v", v)
			}
			if v.ProxyProtocol != (len(v.ProxyProtocolFrom) > 0) {
				t.Fatalf("accepted proxy_protocol %v with from %v", v.ProxyProtocol, v.ProxyProtocolFrom)
			}
			for _, p := range v.ProxyProtocolFrom {
				if !p.IsValid() || p.Bits() == 0 || p != p.Masked() {
					t.Fatalf("accepted proxy_protocol_from %v", p)
				}
			}
			for name, target := range v.Services {
				if CheckServiceName(name) != nil || checkHostPort(target, addrDial, "target") != nil {
					t.Fatalf("accepted service %q: %q", name, target)
				}
			}
		case *Client:
			c = &v.Common
			if len(v.Forwards) == 0 || len(v.Servers) == 0 || v.Redial.Min <= 0 || v.Redial.Max < v.Redial.Min {
				t.Fatalf("accepted client %+v", v)
			}
			for _, a := range v.Servers {
				if checkHostPort(a, addrDial, "address") != nil {
					t.Fatalf("accepted server %q", a)
				}
			}
		default:
			t.Fatalf("Parse returned %T", v)
		}
		if c.KeyFile == "" || c.TunnelOptions().Check() != nil || c.LinkStreams() < 1 ||
			CheckEngine(c.Engine) != nil {
			t.Fatalf("accepted out-of-range config %+v", c)
		}
	})
}
