package config

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/offload-dev/offload/tunnel/handshake"
)

// Clients of a server, each with its own keys (docs/tunnel.md, "Clients"):
//
//	clients:
//	  alice:
//	    key_file: alice.key
//	    services: [web, ssh]
//	  bob:
//	    key_files: [bob-2.key, bob.key]   # rotating: both accepted until bob.key is removed
//	    services: ["*"]                   # every service the server has
//	    socks_allow: [192.0.2.0/24]       # SOCKS destinations, as the top-level socks_allow
//	    reverse_allow: ["0.0.0.0:8022"]   # where it may ask the server to listen
//
// A server config has either key_file (one key, every service: the
// single-client config) or clients, not both. A client's services default
// to none: access is granted by naming it, so a client added in a hurry
// (or a typo in its services) opens nothing. Services name TCP services
// and UDP services (udp_services) alike. With clients, SOCKS destinations
// and reverse listen addresses are per client too (none unless listed):
// the top-level socks_allow and reverse_allow are for the one key_file
// client and an error beside clients.

// Limits of clients.
const (
	// MaxClientKeys is how many keys one client may have at once: its
	// key and the one replacing it.
	MaxClientKeys = 2
	// MaxClientName bounds a client's name (a log field and metric label).
	MaxClientName = 64
	// AllServices in a client's services grants every service.
	AllServices = "*"
)

// ServerClient is one client of a server: its name, key files and what it
// may use.
type ServerClient struct {
	// Name identifies the client in logs (field "client") and metrics
	// (label "client"); it is never sent on the wire.
	Name string
	// KeyFiles are its key files, one or MaxClientKeys (while rotating);
	// a link made with any of them is this client's. Relative paths are
	// made relative to the config file; read them with LoadClientKeys.
	KeyFiles []string
	// Services are the service names it may open; AllServices ("*") means
	// every service. None means none.
	Services []string
	// SocksAllow and ReverseAllow are its SOCKS destinations and reverse
	// listen addresses, in the syntax of the top-level lists; none means
	// none.
	SocksAllow, ReverseAllow []string

	keyFields []string // the field path of each key file, for errors
}

// CheckClientName accepts names of 1 to MaxClientName letters, digits and
// . _ - (not first): they appear unquoted in logs and metric labels.
func CheckClientName(name string) error {
	if name == "" {
		return errors.New("client name is empty")
	}
	if len(name) > MaxClientName {
		return fmt.Errorf("client name %q is longer than %d characters", name, MaxClientName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("client name %q: want letters, digits, and . _ - after the first character", name)
		}
	}
	return nil
}

// clientsSpec decodes a server's clients.
func (d *decoder) clientsSpec(s *Server) fieldSpec {
	return fieldSpec{name: "clients", decode: func(v value) {
		s.fields[v.field] = v.at
		entries, ok := d.mapping(v)
		if !ok {
			return
		}
		if len(entries) == 0 {
			d.errorf(v.at, v.field, "no clients; list at least one as NAME: {key_file: FILE, services: [NAME, ...]}, or use key_file alone")
		}
		s.clientsSet = true
		for _, e := range entries {
			s.fields[e.field] = e.at
			if err := CheckClientName(e.key); err != nil {
				d.add(e.at, e.field, err)
				continue
			}
			c := ServerClient{Name: e.key}
			var keyFileSet bool
			d.object(e.value, []fieldSpec{
				{name: "key_file", decode: func(v value) {
					s.fields[v.field] = v.at
					keyFileSet = true
					if f := d.path(v, s.File); f != "" {
						c.KeyFiles = append(c.KeyFiles, f)
						c.keyFields = append(c.keyFields, v.field)
					}
				}},
				{name: "key_files", decode: func(v value) {
					s.fields[v.field] = v.at
					if keyFileSet {
						d.errorf(v.at, v.field, "key_file and key_files are exclusive: list every key in key_files")
						return
					}
					keyFileSet = true
					items, ok := d.sequence(v)
					if !ok {
						return
					}
					if len(items) == 0 || len(items) > MaxClientKeys {
						d.errorf(v.at, v.field, "%d key files: want 1 or %d (the key and the one replacing it)", len(items), MaxClientKeys)
						return
					}
					for _, it := range items {
						s.fields[it.field] = it.at
						if f := d.path(it, s.File); f != "" {
							c.KeyFiles = append(c.KeyFiles, f)
							c.keyFields = append(c.keyFields, it.field)
						}
					}
				}},
				{name: "services", decode: func(v value) {
					s.fields[v.field] = v.at
					items, ok := d.sequence(v)
					if !ok {
						return
					}
					seen := map[string]bool{}
					for _, it := range items {
						s.fields[it.field] = it.at
						var name string
						d.str(it, &name, func(n string) error {
							if n == AllServices {
								return nil
							}
							return CheckServiceName(n)
						})
						if name == "" {
							continue
						}
						if seen[name] {
							d.errorf(it.at, it.field, "%q is listed twice", name)
							continue
						}
						seen[name] = true
						c.Services = append(c.Services, name)
					}
				}},
				{name: "socks_allow", decode: func(v value) { s.fields[v.field] = v.at; d.allowList(v, &c.SocksAllow, true) }},
				{name: "reverse_allow", decode: func(v value) { s.fields[v.field] = v.at; d.allowList(v, &c.ReverseAllow, false) }},
			})
			if !keyFileSet {
				d.errorf(e.at, join(e.field, "key_file"), "missing (required): the client's key file, or key_files while rotating")
			}
			s.Clients = append(s.Clients, c)
		}
	}}
}

// isMapping reports whether v is a mapping (else object has reported
// it, and a missing field is no news).
func isMapping(v value) bool {
	_, ok := (&decoder{}).mapping(v)
	return ok
}

// path decodes a file name, relative to the config file's directory.
func (d *decoder) path(v value, file string) string {
	var p string
	d.str(v, &p, func(s string) error {
		if s == "" {
			return errors.New("is empty")
		}
		return nil
	})
	if p != "" && !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(file), p)
	}
	return p
}

// finishClients checks what depends on clients and the rest of a server's
// config: key_file or clients (one of them), services each client names,
// a key file used by one client only, and at most handshake.MaxKeys keys.
func (d *decoder) finishClients(s *Server, top value) {
	_, keyFile := s.fields["key_file"]
	switch {
	case s.clientsSet && s.KeyFile != "":
		d.errorf(s.fields["key_file"], "key_file", "key_file and clients are exclusive: with clients, every key belongs to a client (move it into one, with its services)")
	case !s.clientsSet && !keyFile && isMapping(top):
		d.errorf(top.at, "key_file", "missing (required), or clients")
	}
	if s.clientsSet {
		for _, f := range []string{"socks_allow", "reverse_allow"} {
			if a, set := s.fields[f]; set {
				d.errorf(a, f, "with clients, %s is per client: list it under each client that may use it (clients.NAME.%s)", f, f)
			}
		}
	}
	owner := map[string]string{}
	keys := 0
	for _, c := range s.Clients {
		base := join("clients", c.Name)
		for i, f := range c.KeyFiles {
			field := c.keyFields[i]
			switch prev, dup := owner[f]; {
			case dup && prev == c.Name:
				d.errorf(s.fields[field], field, "key file %s is listed twice", f)
			case dup:
				d.errorf(s.fields[field], field, "key file %s is also %s's: every client needs its own key", f, prev)
			}
			owner[f] = c.Name
		}
		keys += len(c.KeyFiles)
		for i, name := range c.Services {
			if name == AllServices {
				if len(c.Services) > 1 {
					field := base + ".services"
					d.errorf(s.fields[field], field, "%q grants every service; list it alone", AllServices)
				}
				continue
			}
			_, tcp := s.Services[name]
			if _, udp := s.UDPServices[name]; !tcp && !udp {
				field := base + ".services[" + strconv.Itoa(i) + "]"
				known := []string{AllServices}
				for n := range s.Services {
					known = append(known, n)
				}
				for n := range s.UDPServices {
					known = append(known, n)
				}
				sort.Strings(known) // a tie picks the same name every run
				msg := fmt.Sprintf("%q is not one of the server's services or udp_services", name)
				d.add(s.fields[field], field, withSuggestion(errors.New(msg), msg, name, known))
			}
		}
	}
	if keys > handshake.MaxKeys {
		d.errorf(s.fields["clients"], "clients", "%d keys in all, at most %d (a handshake tries each: docs/protocol.md, \"Which key\")", keys, handshake.MaxKeys)
	}
}

// ClientKeys is one client's keys, read from its key files.
type ClientKeys struct {
	ServerClient
	Keys [][]byte // one per key file, in order
}

// LoadClientKeys reads every client's key files with LoadKey. Every
// problem is reported, as Errors with an *Error at each key file's field,
// so that four missing key files take one run to find, not four; two
// clients with the same key (copied files) are refused, since a link
// could not tell them apart.
func (s *Server) LoadClientKeys() ([]ClientKeys, error) {
	out := make([]ClientKeys, 0, len(s.Clients))
	type seen struct {
		key   []byte
		field string
	}
	var all []seen
	var errs Errors
	fail := func(field string, err error) {
		var e *Error
		if errors.As(s.FieldError(field, err), &e) {
			errs = append(errs, e)
		}
	}
	for _, c := range s.Clients {
		ck := ClientKeys{ServerClient: c}
	files:
		for i, f := range c.KeyFiles {
			field := c.keyFields[i]
			key, err := LoadKey(f)
			if err != nil {
				fail(field, err)
				continue
			}
			for _, p := range all {
				if subtle.ConstantTimeCompare(p.key, key) == 1 {
					fail(field, fmt.Errorf("%w: key file %s holds the same key as %s", ErrKeyReused, f, p.field))
					continue files
				}
			}
			all = append(all, seen{key, field})
			ck.Keys = append(ck.Keys, key)
		}
		out = append(out, ck)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// ErrKeyReused means two of a server's clients (or one client's two key
// files) hold the same key, so a link could not tell which client it is.
// Make each client its own key with offload keygen.
var ErrKeyReused = errors.New("the same key for two clients")
