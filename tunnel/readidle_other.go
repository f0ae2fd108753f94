//go:build !unix

package tunnel

import "net"

// readIdle reads from tc into *cb (readidle_unix.go); here the buffer
// is kept while the connection waits.
func readIdle(tc *net.TCPConn, cb **copyBuf, pool *bufPool) (int, error) {
	if *cb == nil {
		*cb = pool.get()
	}
	return tc.Read((*cb).data())
}
