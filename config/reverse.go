package config

import (
	"fmt"
	"net/netip"
)

// ReverseForward asks the server to listen on Listen (an address its
// reverse_allow allows) and carries every connection accepted there back
// to Target, which the client dials.
type ReverseForward struct {
	Listen string // an IP literal and port on the server: 0.0.0.0:9000, [::1]:9000
	Target string // host:port on the client's side
}

// reverseForwards decodes the client's reverse list.
func (d *decoder) reverseForwards(c *Client, v value) {
	items, ok := d.sequence(v)
	if !ok {
		return
	}
	seen := map[netip.AddrPort]int{}
	for _, item := range items {
		var f ReverseForward
		var listenAt at
		d.object(item, []fieldSpec{
			{name: "listen", required: true, decode: func(v value) {
				listenAt = v.at
				c.fields[v.field] = v.at // offload validate's pair check names it
				d.str(v, &f.Listen, func(a string) error {
					ap, err := netip.ParseAddrPort(a)
					if err != nil || ap.Port() == 0 || ap.Addr().Zone() != "" {
						return fmt.Errorf("address %q: want an IP address and a port on the server (0.0.0.0:9000, [::1]:9000)", a)
					}
					return nil
				})
			}},
			{name: "target", required: true, decode: func(v value) {
				d.str(v, &f.Target, func(a string) error { return checkHostPort(a, addrDial, "target") })
			}},
		})
		c.fields[item.field] = item.at
		if f.Listen == "" || f.Target == "" {
			continue
		}
		ap := netip.MustParseAddrPort(f.Listen)
		if line, dup := seen[ap]; dup {
			d.errorf(listenAt, item.field+".listen", "address %s is already asked for on line %d", f.Listen, line)
			continue
		}
		seen[ap] = listenAt.line
		c.Reverse = append(c.Reverse, f)
	}
}
