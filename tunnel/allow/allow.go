// Package allow is the destination allowlist of offload's server: which
// addresses a SOCKS client may make the server dial, and where a client may
// ask the server to listen (reverse forwards). Nothing is allowed unless a
// rule says so.
//
// A rule is one string:
//
//	127.0.0.2/32          a network (CIDR), every port
//	::1                   an address (a /32 or /128), every port
//	10.1.0.0/16:22        a network, one port
//	[fd00::/8]:8000-8100  an IPv6 network (in brackets when a port follows), a port range
//	[::1]:*               every port, written out
//	example.com:443       a DNS name, exactly (SOCKS only; a port is required)
//	*.example.com:443     any name below example.com (not example.com itself)
//
// Networks and addresses are checked against the address the server
// dials, after a name was resolved, so a name can never lead to an address
// the rules do not allow by address. A name rule allows a requested name;
// the addresses it resolves to are then dialled only if they are public
// (global unicast, not private, loopback, link-local or shared address
// space): a name that resolves into this host or its networks (DNS
// rebinding) needs an address rule for that address.
package allow

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ErrRule is wrapped by every error Parse returns: the rule is not one of
// the forms in the package comment.
var ErrRule = errors.New("bad allow rule")

// Ports is an inclusive port range.
type Ports struct{ Lo, Hi uint16 }

// Has reports whether p is in the range.
func (r Ports) Has(p uint16) bool { return p >= r.Lo && p <= r.Hi }

// Rule is one parsed allow rule: a network or a name pattern, and ports.
type Rule struct {
	// Prefix is the network of an address rule; invalid for a name rule.
	Prefix netip.Prefix
	// Name is the name of a name rule, lower case, without a trailing dot;
	// "*.example.com" for the names below example.com.
	Name  string
	Ports Ports
	text  string
}

// String returns the rule as it was written.
func (r Rule) String() string { return r.text }

// Parse parses one rule. names says whether name rules are allowed (SOCKS
// destinations) or only addresses (listen addresses).
func Parse(s string, names bool) (Rule, error) {
	r := Rule{text: s, Ports: Ports{0, 65535}}
	host, ports, err := net.SplitHostPort(s)
	if err != nil {
		// No port: the whole string is an address or network.
		host, ports = s, ""
	}
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return Rule{}, fmt.Errorf("%w %q: %w", ErrRule, s, err)
		}
		if p.Addr().Zone() != "" {
			return Rule{}, fmt.Errorf("%w %q: zones are not allowed", ErrRule, s)
		}
		r.Prefix = p.Masked()
	} else if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Rule{}, fmt.Errorf("%w %q: zones are not allowed", ErrRule, s)
		}
		a = a.Unmap()
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
	} else {
		if !names {
			return Rule{}, fmt.Errorf("%w %q: want an IP address or network (CIDR), with an optional :port or :lo-hi", ErrRule, s)
		}
		if ports == "" {
			return Rule{}, fmt.Errorf("%w %q: a name rule needs a port (name:443, name:*)", ErrRule, s)
		}
		name, err := namePattern(host)
		if err != nil {
			return Rule{}, fmt.Errorf("%w %q: %w", ErrRule, s, err)
		}
		r.Name = name
	}
	if ports != "" {
		if r.Ports, err = parsePorts(ports); err != nil {
			return Rule{}, fmt.Errorf("%w %q: %w", ErrRule, s, err)
		}
	}
	return r, nil
}

func parsePorts(s string) (Ports, error) {
	if s == "*" {
		return Ports{0, 65535}, nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	l, err1 := strconv.ParseUint(lo, 10, 16)
	h, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil || l == 0 || l > h {
		return Ports{}, fmt.Errorf("ports %q: want *, a port (1-65535) or lo-hi", s)
	}
	return Ports{uint16(l), uint16(h)}, nil
}

// namePattern checks a name rule's host and returns it in lower case.
func namePattern(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	rest := strings.TrimPrefix(h, "*.")
	if err := CheckName(rest); err != nil {
		return "", err
	}
	if !strings.Contains(rest, ".") && rest != h {
		// "*.com" would allow a whole top-level domain.
		return "", fmt.Errorf("wildcard %q covers a whole top-level domain", h)
	}
	return h, nil
}

// CheckName reports whether s is a DNS name the server will resolve:
// 1..253 characters, labels of 1..63 letters, digits, '-' or '_'. It
// refuses IP literals' look-alikes only as far as a name can't hold ':'
// or '%'.
func CheckName(s string) error {
	s = strings.TrimSuffix(s, ".")
	if len(s) == 0 || len(s) > 253 {
		return fmt.Errorf("name of %d characters (want 1..253)", len(s))
	}
	for _, label := range strings.Split(s, ".") {
		if len(label) == 0 || len(label) > 63 {
			return fmt.Errorf("name %q has a label of %d characters (want 1..63)", s, len(label))
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("name %q has the character %q", s, c)
			}
		}
	}
	return nil
}

// matchName reports whether the rule's name pattern matches name.
func (r Rule) matchName(name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if suffix, ok := strings.CutPrefix(r.Name, "*"); ok {
		return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
	}
	return name == r.Name
}

// List is a set of rules; the zero List allows nothing.
type List []Rule

// ParseList parses rules; the error names the first bad one.
func ParseList(rules []string, names bool) (List, error) {
	l := make(List, 0, len(rules))
	for _, s := range rules {
		r, err := Parse(s, names)
		if err != nil {
			return nil, err
		}
		l = append(l, r)
	}
	return l, nil
}

// Allows reports whether the server may dial a at port. name is the name
// the client asked for, which resolved to a, or "" if the client gave an
// address. The rule that allowed it is returned for the log.
func (l List) Allows(name string, a netip.Addr, port uint16) (Rule, bool) {
	a = a.Unmap().WithZone("")
	for _, r := range l {
		if !r.Ports.Has(port) {
			continue
		}
		if r.Name == "" {
			if r.Prefix.Contains(a) {
				return r, true
			}
			continue
		}
		if name != "" && r.matchName(name) && IsPublic(a) {
			return r, true
		}
	}
	return Rule{}, false
}

// shared is RFC 6598's shared address space (carrier-grade NAT): not
// private by netip's definition, yet inside an operator's network.
var shared = netip.MustParsePrefix("100.64.0.0/10")

// IsPublic reports whether a is an address on the internet at large:
// global unicast, and not private, shared (100.64/10), loopback,
// link-local, multicast or unspecified.
func IsPublic(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsGlobalUnicast() && !a.IsPrivate() && !shared.Contains(a)
}
