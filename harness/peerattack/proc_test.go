package main

import "testing"

func TestParseStatus(t *testing.T) {
	st, err := parseStatus("Name:\toffload\nVmPeak:\t  20000 kB\nVmRSS:\t    9876 kB\nThreads:\t7\n")
	if err != nil || st.RSS != "9876 kB" || st.Threads != "7" {
		t.Fatalf("got %+v, %v", st, err)
	}
	if _, err := parseStatus("Name:\toffload\nState:\tZ (zombie)\nThreads:\t1\n"); err == nil {
		t.Fatal("a status without VmRSS parsed")
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a ")" in it; utime 120, stime 34.
	line := "4242 (off load) x) S 1 4242 4242 0 -1 4194560 700 0 0 0 120 34 0 0 20 0 9 0 100 0 0\n"
	n, err := parseStatCPU(line)
	if err != nil || n != 154 {
		t.Fatalf("got %d, %v; want 154", n, err)
	}
	if _, err := parseStatCPU("4242 (offload) S 1 2"); err == nil {
		t.Fatal("a short stat line parsed")
	}
}
