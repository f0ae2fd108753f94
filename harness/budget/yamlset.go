package main

import (
	"strings"
)

// setTopLevel replaces the block of the top-level YAML key in text (its
// "key:" line at column 0 and the indented lines under it) with block,
// which must start with "key:"; if the file has no such key, block is
// appended. Comment lines at column 0 end a block, so the commented
// examples stay where they are. It is enough for examples/*.yaml, whose
// top-level keys are plain words; the result is checked by the real config
// loader when offload starts.
func setTopLevel(text, key, block string) string {
	lines := strings.SplitAfter(text, "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	block = strings.TrimRight(block, "\n") + "\n"
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, key+":") {
			start = i
			break
		}
	}
	if start < 0 {
		out := strings.Join(lines, "")
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		return out + block
	}
	end := start + 1
	// The block goes on while lines are indented; blank lines belong to it
	// only if an indented line follows them.
	for j := start + 1; j < len(lines); j++ {
		l := lines[j]
		if strings.TrimSpace(l) == "" {
			continue
		}
		if l[0] != ' ' && l[0] != '\t' {
			break
		}
		end = j + 1
	}
	return strings.Join(lines[:start], "") + block + strings.Join(lines[end:], "")
}
