//go:build !unix

package stream

import "net"

// readIdle reads from tc into *cb (readidle_unix.go); here the buffer
// is kept while the connection waits.
func readIdle(tc *net.TCPConn, cb **copyBuf, pool *BufPool) (int, error) {
	if *cb == nil {
		*cb = pool.get()
	}
	return tc.Read((*cb).data())
}

// placeReader is readidle_unix.go's; here there is none, and up copies
// through its own buffer.
type placeReader struct {
	short bool
	err   error
}

var errNoData error

func newPlaceReader(*net.TCPConn) (*placeReader, bool) { return nil, false }

func (*placeReader) Fill([]byte) int { return 0 }

func (*placeReader) wait() error { return nil }
