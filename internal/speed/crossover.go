package speed

// Curve is one engine's throughput over block sizes, as measured by Run.
type Curve struct {
	Engine  string
	Results []Result
}

// Band is a range of block sizes over which one engine is the fastest.
type Band struct {
	From, To int    // block sizes, inclusive, among the measured ones
	Engine   string // the fastest engine over the band
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
