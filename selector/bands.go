package selector

import (
	"sort"

	"github.com/offload-dev/offload/engine"
)

// winner returns the engine to use at pt among the usable engines: the
// fastest one, except that an engine other than software must beat
// software by more than margin (hysteresis); otherwise software, the
// simpler choice, stays. Engines missing from pt are not candidates.
func winner(pt Point, usable []string, margin float64) string {
	best, bestBPS := "", -1.0
	for _, name := range usable {
		if bps, ok := pt.BPS[name]; ok && bps > bestBPS {
			best, bestBPS = name, bps
		}
	}
	sw, ok := pt.BPS[engine.SoftwareName]
	if !ok || best == engine.SoftwareName || !contains(usable, engine.SoftwareName) {
		return best
	}
	if bestBPS <= sw*(1+margin) {
		return engine.SoftwareName
	}
	return best
}

// bands turns the winners at the measured points (ascending sizes) into
// bands that cover every size from 1 to maxFrame: a band starts at the
// first point its engine wins and ends just before the next band's first
// point, so the switch happens at a size where the new engine was measured
// to win.
//
// Between engines other than software the margin applies too: the engine
// of the band so far keeps the next point unless the fastest one beats it
// by more than margin, so two devices (or a device and the kernel's CPU
// driver) within noise of each other do not alternate.
func bands(points []Point, usable []string, margin float64, maxFrame int) []Band {
	var out []Band
	for _, pt := range points {
		w := winner(pt, usable, margin)
		if w == "" {
			continue
		}
		if n := len(out); n > 0 && w != out[n-1].Engine && w != engine.SoftwareName {
			inc := out[n-1].Engine
			if bps, ok := pt.BPS[inc]; ok && contains(usable, inc) && pt.BPS[w] <= bps*(1+margin) {
				w = inc
			}
		}
		if n := len(out); n > 0 {
			if out[n-1].Engine == w {
				continue
			}
			out[n-1].To = pt.Size - 1
			out = append(out, Band{From: pt.Size, Engine: w})
			continue
		}
		out = append(out, Band{From: 1, Engine: w})
	}
	if len(out) == 0 {
		return []Band{{From: 1, To: maxFrame, Engine: engine.SoftwareName}}
	}
	out[len(out)-1].To = max(maxFrame, out[len(out)-1].From)
	return smooth(out)
}

// smooth merges bands narrower than 1/16 of their first size into the band
// before them when they lie between two bands of one engine (A B A) or end
// the table: sizes that close cannot have different winners but for noise
// (e.g. 65520 and 65536 bytes), and such a band gains nothing measurable.
func smooth(bs []Band) []Band {
	narrow := func(b Band) bool { return b.From > 1 && (b.To-b.From+1)*16 < b.From }
	for i := 1; i < len(bs); i++ {
		last := i == len(bs)-1
		if !narrow(bs[i]) || !(last || bs[i-1].Engine == bs[i+1].Engine) {
			continue
		}
		bs[i-1].To = bs[i].To
		if !last {
			bs[i-1].To = bs[i+1].To
			bs = append(bs[:i], bs[i+2:]...)
		} else {
			bs = bs[:i]
		}
		i = 0 // merged bands may now be neighbours of their own engine
	}
	return bs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// grid is the sizes calibration measures first: powers of two from 16 to
// maxFrame, and the sizes real frames take: maxFrame (a full frame of CTR,
// or of CBC whose padding fills a block), maxFrame-16 (a full CBC frame of
// 16n-1 bytes or less plaintext), and typical MTU-sized payloads (1472 B:
// a 1500-byte IPv4 MTU minus UDP/IP headers; 1440 B, a TCP MSS of 1448
// bytes rounded down to blocks). All are multiples of 16.
func grid(maxFrame int) []int {
	var s []int
	for n := 16; n <= maxFrame; n *= 2 {
		s = append(s, n)
	}
	for _, n := range []int{maxFrame, maxFrame - 16, 1472, 1440} {
		if n >= 16 && n <= maxFrame {
			s = append(s, n&^15)
		}
	}
	sort.Ints(s)
	out := s[:0]
	for i, n := range s {
		if i == 0 || n != s[i-1] {
			out = append(out, n)
		}
	}
	return out
}
