package metricsserver

import (
	"encoding/json"
	"fmt"
	"net"
	"net/textproto"
)

// /status on the metrics endpoint: the JSON of what Options.Status
// returns (live.Status, which tunnel/status.go builds), for `offload
// status`. It is behind the same access rules as /metrics (server.go):
// loopback only unless a bearer token is set, and then every request
// carries it or gets 401. It shows more than the metrics
// (the peers' addresses), so it is never open where /metrics is not.
// One GET builds one Status: a few atomic loads per link and engine and
// a lock per link's stream tally; nothing is kept between requests.

// answerStatus answers GET or HEAD /status.
func answerStatus(conn net.Conn, req *request, status func() any, authorized func(textproto.MIMEHeader) bool) error {
	method := req.method
	if !authorized(req.header) {
		return answerUnauthorized(conn, method)
	}
	if method != "GET" && method != "HEAD" {
		return writeAnswer(conn, 405, "Method Not Allowed", "text/plain", []byte("GET or HEAD\n"), true, "")
	}
	body, err := json.MarshalIndent(status(), "", "  ")
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	return writeAnswer(conn, 200, "OK", "application/json", append(body, '\n'), method == "GET", "")
}

// answerUnauthorized is the 401 of /metrics and /status.
func answerUnauthorized(conn net.Conn, method string) error {
	return writeAnswer(conn, 401, "Unauthorized", "text/plain", []byte("bearer token required\n"), method != "HEAD", `WWW-Authenticate: Bearer realm="offload metrics"`)
}
