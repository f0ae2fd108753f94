package testutil

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// HTTP makes one request, method on http://addr+path, with an Authorization
// header when auth is not empty, on a connection of its own (no
// keep-alive: the metrics listener's slots count connections), and returns
// the status code and the body.
func HTTP(method, addr, path, auth string) (int, string, error) {
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Request is HTTP without a token, failing t when the request does.
func Request(t testing.TB, method, addr, path string) (int, string) {
	t.Helper()
	code, body, err := HTTP(method, addr, path, "")
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}
