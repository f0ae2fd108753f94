package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/selector"
)

// ErrInput means the input is neither `offload speed -json` output nor a
// profile, or has nothing to plot.
var ErrInput = errors.New("not a speed report or profile")

// chart is what gets drawn: one series per engine, crossovers marked.
type chart struct {
	Title      string
	Subtitle   string
	Series     []series
	Crossovers []crossover
}

type series struct {
	Engine string
	Driver string // "virtio_crypto_aes_cbc, hardware"
	Points []point
}

type point struct {
	Size int
	BPS  float64
}

// crossover is where the engine in use changes, at Size bytes.
type crossover struct {
	Size     int
	From, To string
	Exact    bool // a profile's band edge, not a guess between two sizes
}

// speedReport is the part of `offload speed -json` the plot reads.
type speedReport struct {
	Kernel    string `json:"kernel"`
	Cipher    string `json:"cipher"`
	Direction string `json:"direction"`
	CPUAES    bool   `json:"cpu_aes"`
	Engines   []struct {
		Engine  string         `json:"engine"`
		Driver  *engine.Driver `json:"driver"`
		Results []struct {
			Size      int   `json:"size"`
			Ops       int64 `json:"ops"`
			ElapsedNS int64 `json:"elapsed_ns"`
		} `json:"results"`
	} `json:"engines"`
	Bands []struct {
		From   int    `json:"from"`
		To     int    `json:"to"`
		Engine string `json:"engine"`
	} `json:"bands"`
}

// parse reads a profile (which table: cipher and direction, "" for the
// first) or a speed report.
func parse(data []byte, cipher, dir string) (*chart, error) {
	var probe struct {
		Tables  json.RawMessage `json:"tables"`
		Engines json.RawMessage `json:"engines"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	switch {
	case probe.Tables != nil:
		var p selector.Profile
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, fmt.Errorf("profile: %w", err)
		}
		return fromProfile(&p, cipher, dir)
	case probe.Engines != nil:
		var r speedReport
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("speed report: %w", err)
		}
		return fromSpeed(&r)
	}
	return nil, fmt.Errorf("%w: no \"tables\" or \"engines\"", ErrInput)
}

func fromProfile(p *selector.Profile, cipher, dir string) (*chart, error) {
	var t *selector.Table
	for i := range p.Tables {
		if (cipher == "" || p.Tables[i].Cipher == cipher) && (dir == "" || p.Tables[i].Direction == dir) {
			t = &p.Tables[i]
			break
		}
	}
	if t == nil {
		return nil, fmt.Errorf("%w: profile has no table for %q %q", ErrInput, cipher, dir)
	}
	c := &chart{Title: fmt.Sprintf("%s %s: throughput by frame size", t.Cipher, t.Direction)}
	var drivers []string
	for _, e := range t.Engines {
		if e.Driver == nil {
			continue
		}
		s := series{Engine: e.Name, Driver: describe(*e.Driver)}
		if e.Failed != "" {
			s.Driver += ", failed"
		}
		for _, pt := range t.Points {
			if bps, ok := pt.BPS[e.Name]; ok && bps > 0 {
				s.Points = append(s.Points, point{pt.Size, bps})
			}
		}
		if len(s.Points) > 0 {
			c.Series = append(c.Series, s)
			drivers = append(drivers, e.Driver.Name)
		}
	}
	for i := 1; i < len(t.Bands); i++ {
		c.Crossovers = append(c.Crossovers, crossover{Size: t.Bands[i].From, From: t.Bands[i-1].Engine, To: t.Bands[i].Engine, Exact: true})
	}
	c.Subtitle = subtitle(p.Kernel, p.CPUAES, drivers)
	if len(c.Series) == 0 {
		return nil, fmt.Errorf("%w: no engine has measurements", ErrInput)
	}
	return c, nil
}

func fromSpeed(r *speedReport) (*chart, error) {
	c := &chart{Title: fmt.Sprintf("%s %s: throughput by block size", r.Cipher, r.Direction)}
	var drivers []string
	for _, e := range r.Engines {
		s := series{Engine: e.Engine}
		if e.Driver != nil {
			s.Driver = describe(*e.Driver)
			drivers = append(drivers, e.Driver.Name)
		}
		for _, res := range e.Results {
			if res.ElapsedNS > 0 && res.Ops > 0 {
				s.Points = append(s.Points, point{res.Size, float64(res.Ops) * float64(res.Size) / (float64(res.ElapsedNS) / 1e9)})
			}
		}
		sort.Slice(s.Points, func(i, j int) bool { return s.Points[i].Size < s.Points[j].Size })
		if len(s.Points) > 0 {
			c.Series = append(c.Series, s)
		}
	}
	// Bands of a speed report end and start at measured sizes; the
	// crossover lies between, drawn at their geometric mean.
	for i := 1; i < len(r.Bands); i++ {
		mid := int(math.Sqrt(float64(r.Bands[i-1].To) * float64(r.Bands[i].From)))
		c.Crossovers = append(c.Crossovers, crossover{Size: mid, From: r.Bands[i-1].Engine, To: r.Bands[i].Engine})
	}
	c.Subtitle = subtitle(r.Kernel, r.CPUAES, drivers)
	if len(c.Series) == 0 {
		return nil, fmt.Errorf("%w: no engine has results", ErrInput)
	}
	return c, nil
}

func describe(d engine.Driver) string {
	kind := "cpu"
	if d.Hardware {
		kind = "hardware"
	}
	return d.Name + ", " + kind
}

func subtitle(kernel string, aes bool, drivers []string) string {
	s := kernel
	if aes {
		s += ", CPU AES instructions on"
	} else {
		s += ", CPU AES instructions off"
	}
	if len(drivers) > 0 {
		s += "; drivers: " + strings.Join(drivers, ", ")
	}
	return s
}
