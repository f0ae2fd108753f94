package tunnel

// Healthy reports whether the server is accepting links: true from the
// start of Serve until its context ends or its listener fails, false
// while it drains and after. A load balancer's health check (/healthz,
// tunnel/metricsserver) uses it to stop sending new clients to a server that is
// going away, while its open streams finish.
func (s *Server) Healthy() bool { return s.serving.Load() }

// Healthy reports whether the client is running with a link up: false
// before the first link, while it fails over or redials, and once it is
// shutting down.
func (c *Client) Healthy() bool {
	return c.running.Load() && c.ctr.links.Load() > 0
}
