//go:build !unix

package speed

import "time"

// usage is the process's CPU times and context switches so far; this
// platform cannot tell, so they stay zero.
type usage struct {
	user, sys time.Duration
	switches  int64
}

func readUsage() usage { return usage{} }
