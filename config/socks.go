package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/offload-dev/offload/tunnel/allow"
)

// MaxSocksUsersFile bounds a SOCKS users file.
const MaxSocksUsersFile = 64 << 10

// ErrUsersFormat is wrapped by LoadSocksUsers for a users file that is not
// "user:password" lines. Fix the file.
var ErrUsersFormat = errors.New("bad SOCKS users file")

// ServerRules are the server's permissions beyond services: the SOCKS
// destinations it may dial (socks_allow), its UDP services (udp_services)
// and where clients may ask it to listen (reverse_allow). All deny by
// default: an absent list allows nothing.
type ServerRules struct {
	// SocksAllow are allow rules (package tunnel/allow): networks,
	// addresses and name patterns with ports.
	SocksAllow []string
	// UDPServices maps a UDP service name to the host:port the server
	// sends its datagrams to.
	UDPServices map[string]string
	// ReverseAllow are allow rules for reverse listen addresses
	// (addresses and networks only, with ports).
	ReverseAllow []string
}

// ClientDynamic are the client's forwards beyond the TCP ones: a SOCKS5
// listener, UDP forwards and reverse forwards.
type ClientDynamic struct {
	// Socks is the SOCKS5 listen address; empty means none.
	Socks string
	// SocksUsersFile holds "user:password" lines (RFC 1929); empty means
	// no authentication. Relative to the config file; read it with
	// LoadSocksUsers. Checked as a key file is: mode 0600, owner, dirs.
	SocksUsersFile string
	UDPForwards    []UDPForward
	Reverse        []ReverseForward
}

// allowList decodes a list of allow rules.
func (d *decoder) allowList(v value, dst *[]string, names bool) {
	items, ok := d.sequence(v)
	if !ok {
		return
	}
	for _, item := range items {
		var s string
		d.str(item, &s, func(s string) error {
			_, err := allow.Parse(s, names)
			return err
		})
		if s != "" {
			*dst = append(*dst, s)
		}
	}
}

// serverRuleSpecs are the fields of ServerRules.
func (d *decoder) serverRuleSpecs(s *Server) []fieldSpec {
	track := func(name string, fn func(v value)) fieldSpec {
		return fieldSpec{name: name, decode: func(v value) { s.fields[v.field] = v.at; fn(v) }}
	}
	return []fieldSpec{
		track("socks_allow", func(v value) { d.allowList(v, &s.SocksAllow, true) }),
		track("reverse_allow", func(v value) { d.allowList(v, &s.ReverseAllow, false) }),
		track("udp_services", func(v value) { d.udpServices(s, v) }),
	}
}

// clientDynamicSpecs are the fields of ClientDynamic.
func (d *decoder) clientDynamicSpecs(c *Client) []fieldSpec {
	track := func(name string, fn func(v value)) fieldSpec {
		return fieldSpec{name: name, decode: func(v value) { c.fields[v.field] = v.at; fn(v) }}
	}
	return []fieldSpec{
		track("socks", func(v value) {
			d.str(v, &c.Socks, func(a string) error { return checkHostPort(a, addrListen, "address") })
		}),
		track("socks_users_file", func(v value) {
			d.str(v, &c.SocksUsersFile, func(s string) error {
				if s == "" {
					return errors.New("is empty (leave it out for no authentication)")
				}
				return nil
			})
			if c.SocksUsersFile != "" && !filepath.IsAbs(c.SocksUsersFile) {
				c.SocksUsersFile = filepath.Join(filepath.Dir(c.File), c.SocksUsersFile)
			}
		}),
		track("udp_forwards", func(v value) { d.udpForwards(c, v) }),
		track("reverse", func(v value) { d.reverseForwards(c, v) }),
	}
}

// finishServerRules checks that the server offers something.
func (d *decoder) finishServerRules(s *Server) {
	if len(s.Services) == 0 && len(s.SocksAllow) == 0 && len(s.UDPServices) == 0 && len(s.ReverseAllow) == 0 {
		// Said once the file is a mapping of fields at all (fields has
		// entries): otherwise that is the error.
		if _, set := s.fields["services"]; !set && len(s.fields) > 0 {
			d.errorf(at{1, 0}, "services", "missing: a server needs services, socks_allow, udp_services or reverse_allow")
		}
	}
}

// finishClientDynamic checks that the client forwards something and that
// no two of its listeners can collide.
func (d *decoder) finishClientDynamic(c *Client, prev []listenAddr) {
	if len(c.Forwards) == 0 && c.Socks == "" && len(c.UDPForwards) == 0 && len(c.Reverse) == 0 {
		if _, set := c.fields["forwards"]; !set && len(c.fields) > 0 {
			d.errorf(at{1, 0}, "forwards", "missing: a client needs forwards, socks, udp_forwards or reverse")
		}
	}
	if c.SocksUsersFile != "" && c.Socks == "" {
		d.errorf(c.fields["socks_users_file"], "socks_users_file", "is set but socks is not")
	}
	if c.Socks != "" {
		d.claimListen(&prev, c.Socks, "socks", c.fields["socks"])
	}
}

// claimListen reports addr (a listen address at a, field) if it collides
// with one in prev, and adds it to prev.
func (d *decoder) claimListen(prev *[]listenAddr, addr, field string, a at) {
	la := parseListenAddr(addr, field, a.line)
	for _, p := range *prev {
		if p.conflicts(la) {
			d.errorf(a, field, "address %s is already used by %s (line %d)", addr, p.field, p.line)
			break
		}
	}
	*prev = append(*prev, la)
}

// LoadSocksUsers reads c.SocksUsersFile: nil if there is none. The file
// is checked as a key file (mode 0600, owner, directories) and holds one
// "user:password" per line (RFC 1929: each 1..255 bytes; the user has no
// ':'); blank lines and lines starting with # are skipped. An error is an
// *Error at the socks_users_file field.
func (c *Client) LoadSocksUsers() (map[string]string, error) {
	if c.SocksUsersFile == "" {
		return nil, nil
	}
	users, err := loadSocksUsers(c.SocksUsersFile)
	if err != nil {
		return nil, c.FieldError("socks_users_file", err)
	}
	return users, nil
}

func loadSocksUsers(path string) (map[string]string, error) {
	f, err := OpenPrivate(path, "SOCKS users file")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSocksUsersFile+1))
	if err != nil {
		return nil, fmt.Errorf("SOCKS users file %s: %w", path, err)
	}
	if len(data) > MaxSocksUsersFile {
		return nil, fmt.Errorf("SOCKS users file %s: %w: more than %d bytes", path, ErrTooLarge, MaxSocksUsersFile)
	}
	users := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, pass, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("%w %s:%d: want user:password", ErrUsersFormat, path, n)
		case len(user) == 0 || len(user) > 255 || len(pass) == 0 || len(pass) > 255:
			return nil, fmt.Errorf("%w %s:%d: user and password must be 1..255 bytes each", ErrUsersFormat, path, n)
		}
		if _, dup := users[user]; dup {
			return nil, fmt.Errorf("%w %s:%d: user %q listed twice", ErrUsersFormat, path, n, user)
		}
		users[user] = pass
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("%w %s: no users", ErrUsersFormat, path)
	}
	return users, nil
}
