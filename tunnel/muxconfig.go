package tunnel

import (
	"time"

	"github.com/offload-dev/offload/tunnel/mux"
)

// MinKeepalive (625 ms) is the shortest keepalive interval Options take:
// ten times the interval the peer's ping limit allows (1/mux.PingRate s,
// tunnel/mux/pinglimit.go), and far below any use (the default is 15 s).
const MinKeepalive = 10 * time.Second / mux.PingRate

// muxConfig is the session configuration (tunnel/mux): window,
// keepalive and the receive budget from the options, the session's
// warnings to our logger as "yamux". ctr, if not nil, counts the streams
// the session refused or reset (offload_streams_reset_total).
//
// The mux keeps its own names, those of a general stream multiplexer;
// here they meet the settings (docs/settings.md): link_buffer
// (Options.LinkBuffer) is ReceiveBudget, yamux_window MaxStreamWindow,
// max_streams AcceptBacklog (and half of MaxStreams), keepalive
// KeepAliveInterval. The Name fields make the mux's messages say the
// setting to raise.
//
// The session holds up to twice MaxStreams streams: the tunnel answers a
// stream past MaxStreams itself, with statusBusy and the reason
// (server.go), and such a stream is in the session until both ends closed
// it; only a peer that opens twice MaxStreams at once meets the session's
// own RST.
func (o *Options) muxConfig(ctr *mux.Counters) *mux.Config {
	return &mux.Config{
		AcceptBacklog:     o.MaxStreams,
		MaxStreams:        2 * o.MaxStreams,
		MaxStreamWindow:   uint32(o.YamuxWindow),
		ReceiveBudget:     o.LinkBuffer,
		KeepAliveInterval: o.Keepalive,
		Logger:            o.Logger.Named("yamux"),
		MaxStreamsName:    "max_streams",
		ReceiveBudgetName: "link_buffer",
		Counters:          ctr,
	}
}

// muxResets are the streams the sessions of a server or client refused
// or reset for a peer's excess (mux.Counters).
type muxResets struct{ mux.Counters }

// Load is how many, refused and reset together.
func (r *muxResets) Load() uint64 { return r.Refused.Load() + r.Overruns.Load() }
