package speed

import (
	"cmp"
	"slices"

	"github.com/offload-dev/offload/measure/ratio"
)

// Curve is one engine's throughput over block sizes, as measured by Run.
type Curve struct {
	Engine  string
	Results []Result
}

// Band is a range of block sizes over which one engine is the fastest.
type Band struct {
	From   int    `json:"from"` // block sizes, inclusive, among the measured ones
	To     int    `json:"to"`
	Engine string `json:"engine"` // the fastest engine over the band
	// Lead is, where Leads filled it in, the engine's narrowest lead over
	// the band: its paired ratio over LeadOver, the runner-up at LeadSize.
	// Where its rounds straddle 1.00x the band is not a clear win.
	Lead     *ratio.Paired `json:"lead,omitempty"`
	LeadOver string        `json:"lead_over,omitempty"`
	LeadSize int           `json:"lead_size,omitempty"`
	// FromLead and ToLead are the leads at the band's first and last
	// size, next to the crossovers: a crossover is sure only where both
	// of its sides are.
	FromLead *ratio.Paired `json:"lead_at_from,omitempty"`
	ToLead   *ratio.Paired `json:"lead_at_to,omitempty"`
}

// SureCrossover reports whether the crossover from band a to the next
// band b is measured on both sides: neither a's lead at its last size nor
// b's at its first straddles 1.00x. Without leads (one engine, or Leads
// not run) there is nothing to doubt it by.
func SureCrossover(a, b Band) bool {
	return !(a.ToLead != nil && a.ToLead.Straddles()) && !(b.FromLead != nil && b.FromLead.Straddles())
}

// Winners walks the measured sizes (those of the first curve; every curve
// must have been measured at the same sizes) and returns the bands over
// which the fastest engine stays the same. More than one band means the
// ranking changes: a crossover lies between one band's To and the next
// band's From. Curves with no results (an engine that failed) are ignored.
func Winners(curves []Curve) []Band {
	var live []Curve
	for _, c := range curves {
		if len(c.Results) > 0 {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return nil
	}
	var bands []Band
	for i, r := range live[0].Results {
		best, bestBps := "", -1.0
		for _, c := range live {
			if i >= len(c.Results) || c.Results[i].Size != r.Size {
				continue
			}
			if bps := c.Results[i].BytesPerSecond(); bps > bestBps {
				best, bestBps = c.Engine, bps
			}
		}
		if n := len(bands); n > 0 && bands[n-1].Engine == best {
			bands[n-1].To = r.Size
			continue
		}
		bands = append(bands, Band{From: r.Size, To: r.Size, Engine: best})
	}
	return bands
}

// Rounds is one engine's measurements over repeated rounds: Runs[k] is
// round k's results, in the order of the sizes.
type Rounds struct {
	Engine string
	Runs   [][]Result
}

// Median is the curve of the median result per size over the rounds (by
// throughput; the lower middle one for an even count), which the table
// shows.
func (r Rounds) Median() Curve {
	c := Curve{Engine: r.Engine}
	if len(r.Runs) == 0 {
		return c
	}
	for i := range r.Runs[0] {
		var at []Result
		for _, run := range r.Runs {
			if i < len(run) {
				at = append(at, run[i])
			}
		}
		slices.SortFunc(at, func(a, b Result) int { return cmp.Compare(a.BytesPerSecond(), b.BytesPerSecond()) })
		c.Results = append(c.Results, at[(len(at)-1)/2])
	}
	return c
}

// Lead is a's throughput over b's at size index i, round by round (runs
// of the same round were made one after the other, so they met much the
// same machine load).
func Lead(a, b Rounds, i int) ratio.Paired {
	var xs []float64
	for k := range min(len(a.Runs), len(b.Runs)) {
		if i < len(a.Runs[k]) && i < len(b.Runs[k]) && b.Runs[k][i].BytesPerSecond() > 0 {
			xs = append(xs, a.Runs[k][i].BytesPerSecond()/b.Runs[k][i].BytesPerSecond())
		}
	}
	return ratio.Of(xs)
}

// Leads fills in each band's narrowest lead: over the band's sizes, the
// runner-up (by median throughput) at each size and the band engine's
// paired ratio over it, keeping the size where that median ratio is
// smallest. The measured sizes are those of the first engine's runs.
func Leads(bands []Band, rounds []Rounds) []Band {
	byName := map[string]Rounds{}
	medians := map[string]Curve{}
	for _, r := range rounds {
		if len(r.Runs) > 0 {
			byName[r.Engine], medians[r.Engine] = r, r.Median()
		}
	}
	out := slices.Clone(bands)
	for bi := range out {
		b := &out[bi]
		win, ok := byName[b.Engine]
		if !ok {
			continue
		}
		for i, res := range medians[b.Engine].Results {
			if res.Size < b.From || res.Size > b.To {
				continue
			}
			second, secondBps := "", -1.0
			for _, r := range rounds {
				m := medians[r.Engine]
				if r.Engine == b.Engine || i >= len(m.Results) {
					continue
				}
				if bps := m.Results[i].BytesPerSecond(); bps > secondBps {
					second, secondBps = r.Engine, bps
				}
			}
			if second == "" {
				continue
			}
			l := Lead(win, byName[second], i)
			if b.Lead == nil || l.Median < b.Lead.Median {
				b.Lead, b.LeadOver, b.LeadSize = &l, second, res.Size
			}
			if res.Size == b.From {
				b.FromLead = &l
			}
			if res.Size == b.To {
				b.ToLead = &l
			}
		}
	}
	return out
}
