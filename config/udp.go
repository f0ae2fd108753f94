package config

import (
	"time"

	"github.com/offload-dev/offload/tunnel"
)

// MaxUDPMaxFlows caps a UDP forward's max_flows; the defaults are the
// tunnel's (tunnel.DefaultUDPIdleTimeout, tunnel.DefaultUDPMaxFlows).
const MaxUDPMaxFlows = 4096

// UDPForward is one client UDP listener: datagrams to Listen go through
// the tunnel to the server's UDP service Service, one flow (stream) per
// source address.
type UDPForward struct {
	Listen      string
	Service     string
	IdleTimeout time.Duration
	MaxFlows    int
}

// udpServices decodes the server's udp_services: name → host:port.
func (d *decoder) udpServices(s *Server, v value) {
	entries, ok := d.mapping(v)
	if !ok {
		return
	}
	s.UDPServices = map[string]string{}
	d.targets(s, entries, s.UDPServices)
}

// targets decodes NAME: host:port entries (services, udp_services) into
// dst.
func (d *decoder) targets(s *Server, entries []entry, dst map[string]string) {
	for _, e := range entries {
		s.fields[e.field] = e.at
		if err := CheckServiceName(e.key); err != nil {
			d.add(e.at, e.field, err)
			continue
		}
		var target string
		d.str(e.value, &target, func(a string) error { return checkHostPort(a, addrDial, "target") })
		if target != "" {
			dst[e.key] = target
		}
	}
}

// udpForwards decodes the client's udp_forwards.
func (d *decoder) udpForwards(c *Client, v value) {
	items, ok := d.sequence(v)
	if !ok {
		return
	}
	var prev []listenAddr
	for _, item := range items {
		f := UDPForward{IdleTimeout: tunnel.DefaultUDPIdleTimeout, MaxFlows: tunnel.DefaultUDPMaxFlows}
		var listenAt at
		d.object(item, []fieldSpec{
			{name: "listen", required: true, decode: func(v value) {
				listenAt = v.at
				d.str(v, &f.Listen, func(a string) error { return checkHostPort(a, addrListen, "address") })
			}},
			{name: "service", required: true, decode: func(v value) {
				c.fields[v.field] = v.at // offload validate's pair check names it
				d.str(v, &f.Service, CheckServiceName)
			}},
			{name: "idle_timeout", decode: func(v value) { d.duration(v, &f.IdleTimeout, true) }},
			{name: "max_flows", decode: func(v value) { d.count(v, &f.MaxFlows, MaxUDPMaxFlows) }},
		})
		c.fields[item.field] = item.at
		if f.Listen == "" || f.Service == "" {
			continue
		}
		d.claimListen(&prev, f.Listen, item.field+".listen", listenAt)
		c.UDPForwards = append(c.UDPForwards, f)
	}
}
