// Package tunnel carries many TCP connections between two hosts over one
// authenticated, encrypted TCP link: the offload server and client.
//
//	app ──TCP──> Client forward ──stream──┐                       ┌──stream──> Server ──TCP──> target
//	app ──TCP──> Client forward ──stream──┼─> yamux ─> record ─TCP─> record ─> yamux ─┤  (services only)
//
// A link is a TCP connection on which handshake.Client/Server ran, then a
// record.Conn (the encrypted frames) and on top a session of the yamux
// wire protocol (tunnel/mux, our implementation). Every forwarded
// connection is one stream. A stream starts with a request
// naming a service and the server's status answer (tunnel/stream); after that
// each direction carries chunks ending with an explicit end marker, so that
// a stream that stops without its end marker (link died, peer aborted) is
// an error, never a clean EOF (tunnel/stream). docs/tunnel.md explains the
// choices.
package tunnel

import (
	"time"

	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/record"
)

func (o *Options) handshakeConfig() handshake.Config {
	return handshake.Config{Suite: o.Suite, PSK: o.PSK, Timeout: o.HandshakeTimeout, Logger: o.Logger, MaxFrame: o.MaxFrame}
}

func (o *Options) recordOptions(stats *record.Stats) record.Options {
	return record.Options{
		MaxFrame: o.MaxFrame,
		Engines:  o.Engines,
		Policy:   o.Policy,
		Logger:   o.Logger,
		Stats:    stats,
		Verify:   o.verifier,
		Stall:    o.stall,

		RekeyFrames:   o.rekeyFrames,
		RekeyInterval: o.RekeyInterval,
	}
}

// aLongTimeAgo is a deadline in the past, to interrupt blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)
