package main

import (
	"strings"
	"testing"
)

func TestParseIperf(t *testing.T) {
	good := `{"start":{},"end":{"sum_sent":{"bytes":1073741824,"seconds":3.4},"sum_received":{"bytes":1069023232,"seconds":3.438674}}}`
	r, err := parseIperf([]byte(good))
	if err != nil || r.sent != 1073741824 || r.seconds != 3.438674 {
		t.Fatalf("%+v, %v", r, err)
	}
	if mbps := r.MBps(); mbps < 312 || mbps > 313 {
		t.Errorf("MBps %.1f, want 312.3 (bytes sent over the longer of the two sides' seconds)", mbps)
	}
	for in, want := range map[string]string{
		`{"start":{},"intervals":[],"end":{},"error":"control socket has closed unexpectedly"}`: "iperf3: control socket has closed unexpectedly",
		`{"end":{"sum_sent":{"bytes":0,"seconds":0},"sum_received":{"bytes":0,"seconds":0}}}`:   "no transfer",
		`iperf3: error - unable to connect to server`:                                           "iperf3 -J",
	} {
		if _, err := parseIperf([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseIperf(%.40q): %v, want an error with %q", in, err, want)
		}
	}
}
