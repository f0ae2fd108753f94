package config

import (
	"fmt"
	"net/netip"
	"strings"
)

// This file holds the settings for running more than one server: the
// client's servers list, and the server's PROXY protocol listener for
// standing behind an L4 load balancer (docs/tunnel.md, "More than one
// server").

// serversSpecs are the client's server and servers fields; finishServers
// checks that exactly one is set.
func (d *decoder) serversSpecs(c *Client) []fieldSpec {
	return []fieldSpec{
		{name: "server", decode: func(v value) {
			c.fields[v.field] = v.at
			var a string
			d.str(v, &a, func(a string) error { return checkHostPort(a, addrDial, "address") })
			if a != "" {
				c.Servers = []string{a}
			}
		}},
		{name: "servers", decode: func(v value) {
			c.fields[v.field] = v.at
			items := d.list(v, "no servers; list at least one host:port")
			seen := map[string]int{}
			var list []string
			for _, item := range items {
				var a string
				d.str(item, &a, func(a string) error { return checkHostPort(a, addrDial, "address") })
				if a == "" {
					continue
				}
				if line, dup := seen[normalAddr(a)]; dup {
					d.errorf(item.at, item.field, "server %s is listed twice (first on line %d)", a, line)
					continue
				}
				seen[normalAddr(a)] = item.at.line
				list = append(list, a)
			}
			c.Servers = list
		}},
	}
}

// normalAddr spells host:port one way, to find a server listed twice
// (e.g. [::1]:7000 and [0:0::1]:7000).
func normalAddr(a string) string {
	if ap, err := netip.ParseAddrPort(a); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return strings.ToLower(a)
}

// finishServers requires server or servers, not both.
func (d *decoder) finishServers(c *Client, top value) {
	one, oneSet := c.fields["server"]
	list, listSet := c.fields["servers"]
	switch {
	case oneSet && listSet:
		// Blame the one written second: the first is what the file meant
		// until then.
		blame, field := list, "servers"
		if list.line < one.line {
			blame, field = one, "server"
		}
		d.errorf(blame, field, "server (line %d) and servers (line %d) are both set; use server for one, servers for a list",
			one.line, list.line)
	case !oneSet && !listSet:
		d.errorf(top.at, "server", "missing (required): server: host:port, or servers: [host:port, ...]")
	}
}

// proxySpecs are the server's proxy_protocol fields, and finish checks,
// once they are decoded, that the two go together.
func (d *decoder) proxySpecs(s *Server) (specs []fieldSpec, finish func()) {
	badFlag := false // proxy_protocol is neither true nor false: reported already
	return []fieldSpec{
			{name: "proxy_protocol", decode: func(v value) {
				s.fields[v.field] = v.at
				badFlag = !d.boolean(v, &s.ProxyProtocol)
			}},
			{name: "proxy_protocol_from", decode: func(v value) {
				s.fields[v.field] = v.at
				items := d.list(v, "empty; list the load balancers' addresses or CIDRs")
				for _, item := range items {
					var p netip.Prefix
					d.str(item, new(string), func(t string) error {
						var err error
						p, err = parsePrefix(t)
						return err
					})
					if p.IsValid() {
						s.ProxyProtocolFrom = append(s.ProxyProtocolFrom, p)
					}
				}
			}},
		}, func() {
			if !badFlag {
				d.finishProxy(s)
			}
		}
}

// parsePrefix reads a CIDR ("10.0.0.0/24", "fd00::/64") or a single
// address ("10.0.0.5", "::1"). Host bits in a CIDR are refused rather than
// dropped (10.0.0.5/8 is likely a typo), and so is a prefix that holds
// every address (0.0.0.0/0, ::/0), which would believe anyone.
func parsePrefix(s string) (netip.Prefix, error) {
	t := strings.TrimSpace(s)
	if !strings.Contains(t, "/") {
		a, err := netip.ParseAddr(t)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", s)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q: an address with a zone can't be matched; leave out %%%s", s, a.Zone())
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(t)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (want e.g. 10.0.0.0/24 or fd00::/64)", s)
	}
	if p.Addr().Is4In6() {
		// Connections from IPv4 are matched unmapped.
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("%q: a v4-mapped prefix shorter than /96; write the IPv4 CIDR", s)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("%q has bits set beyond its /%d; write %v", s, p.Bits(), p.Masked())
	}
	if p.Bits() == 0 {
		return netip.Prefix{}, fmt.Errorf("%q holds every address: anyone could then name any source; list the load balancers", s)
	}
	return p, nil
}

// finishProxy checks that proxy_protocol and proxy_protocol_from go
// together.
func (d *decoder) finishProxy(s *Server) {
	_, fromSet := s.fields["proxy_protocol_from"]
	switch {
	case s.ProxyProtocol && !fromSet:
		d.errorf(s.fields["proxy_protocol"], "proxy_protocol", "needs proxy_protocol_from: the load balancers' addresses (a header from anyone else would let them name any source)")
	case !s.ProxyProtocol && fromSet:
		d.errorf(s.fields["proxy_protocol_from"], "proxy_protocol_from", "is set but proxy_protocol is not true")
	}
}

// list returns a list's items, reporting an empty list with empty (what
// the field wants) and anything but a list as sequence does.
func (d *decoder) list(v value, empty string) []value {
	items, ok := d.sequence(v)
	if ok && len(items) == 0 {
		d.errorf(v.at, v.field, "%s", empty)
	}
	return items
}

// boolean decodes true or false and reports whether it could.
func (d *decoder) boolean(v value, dst *bool) bool {
	s, ok := d.scalar(v)
	if !ok {
		return false
	}
	switch s {
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		d.errorf(v.at, v.field, "%q: want true or false", s)
		return false
	}
	return true
}
