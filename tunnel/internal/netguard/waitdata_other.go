//go:build !unix

package netguard

// WaitData can't look into a socket here: it reports data at once, so
// every PROXY LOCAL connection goes on to the handshake, and a health
// check that closes at once counts as a handshake that failed.
func WaitData(c any) (bool, error) { return true, nil }
