package config

import (
	"fmt"
	"strings"
)

// suggestion returns the known name closest to got, or "" when none is
// close: a typo in a field or value is then fixed from the message alone.
// Close means a case-insensitive edit distance of at most a third of the
// name (at least 1, so "sofware" finds "software" and "max_stream" finds
// "max_streams", but "x" finds nothing).
func suggestion(got string, known []string) string {
	g := strings.ToLower(strings.TrimSpace(got))
	best, bestD := "", -1
	for _, k := range known {
		d := editDistance(g, strings.ToLower(k))
		if bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	if bestD < 0 || best == got || bestD > max(1, len([]rune(g))/3) {
		return ""
	}
	return best
}

// withSuggestion is err with "; did you mean X?" after msg when got is
// close to one of known, else err itself.
func withSuggestion(err error, msg, got string, known []string) error {
	s := suggestion(got, known)
	if s == "" {
		return err
	}
	return &sentinelError{fmt.Sprintf("%s; did you mean %q?", msg, s), err}
}

// editDistance is the Levenshtein distance of a and b in runes, with a
// swap of two neighbours counted as one edit (the commonest typo).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// Three rows of the dynamic programme: two back for the swap.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
