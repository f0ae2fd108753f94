package wgcompare

import (
	"context"
	"testing"
)

// TestRelayZeroCopy sends through the zero-copy relay: the sink gets every
// byte and its samples right (a buffer reused before its send was done
// would show as damage), every send is notified before the half-close,
// and on loopback the kernel reports each send as copied (it copies on
// local delivery), which is why the anchor measures it between routers.
func TestRelayZeroCopy(t *testing.T) {
	sink, pattern := setup(t)
	rl := listen(t)
	stats := make(chan ZeroCopyStats, 2)
	errs := make(chan error, 2)
	go RelayZeroCopy(rl, sink, dialer.DialContext, func(st ZeroCopyStats, err error) {
		stats <- st
		errs <- err
	})
	const n = 3*PatternSize + 12345
	res, err := Send(context.Background(), dialer.DialContext, rl.Addr().String(), pattern, n)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != n || res.Samples != (n+SampleStride-1)/SampleStride {
		t.Errorf("%+v, want %d bytes and %d samples", res, n, (n+SampleStride-1)/SampleStride)
	}
	var up ZeroCopyStats
	for range 2 {
		st := <-stats
		if err := <-errs; err != nil {
			t.Errorf("zero-copy pump: %v", err)
		}
		if st.Sends > up.Sends {
			up = st
		}
	}
	t.Logf("the stream's direction: %+v", up)
	if up.Sends < n/relayBuf {
		t.Errorf("the stream's direction made %d zero-copy sends, want at least %d", up.Sends, n/relayBuf)
	}
	if up.Copied != up.Sends {
		t.Errorf("loopback: %d of %d sends reported copied, want all (local delivery copies)", up.Copied, up.Sends)
	}
}
