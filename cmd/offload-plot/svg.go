package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Layout of the SVG, in pixels.
const (
	width        = 900
	height       = 540
	marginLeft   = 80
	marginRight  = 40
	marginTop    = 70
	marginBottom = 150 // axis label and legend below the plot
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// axes maps sizes (log2) and MB/s (log10) to pixels.
type axes struct {
	minSize, maxSize float64 // log2
	minY, maxY       float64 // log10 of MB/s
}

func newAxes(c *chart) axes {
	a := axes{minSize: math.Inf(1), maxSize: math.Inf(-1), minY: math.Inf(1), maxY: math.Inf(-1)}
	for _, s := range c.Series {
		for _, p := range s.Points {
			a.minSize = math.Min(a.minSize, math.Log2(float64(p.Size)))
			a.maxSize = math.Max(a.maxSize, math.Log2(float64(p.Size)))
			y := math.Log10(p.BPS / 1e6)
			a.minY = math.Min(a.minY, y)
			a.maxY = math.Max(a.maxY, y)
		}
	}
	a.minSize, a.maxSize = math.Floor(a.minSize), math.Ceil(a.maxSize)
	if a.maxSize == a.minSize {
		a.maxSize++
	}
	a.minY, a.maxY = math.Floor(a.minY), math.Ceil(a.maxY)
	if a.maxY == a.minY {
		a.maxY++
	}
	return a
}

// x is the horizontal pixel of a block size.
func (a axes) x(size int) float64 {
	f := (math.Log2(float64(size)) - a.minSize) / (a.maxSize - a.minSize)
	return marginLeft + f*(width-marginLeft-marginRight)
}

// y is the vertical pixel of a throughput in bytes per second.
func (a axes) y(bps float64) float64 {
	f := (math.Log10(bps/1e6) - a.minY) / (a.maxY - a.minY)
	return height - marginBottom - f*(height-marginTop-marginBottom)
}

func sizeLabel(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

func esc(s string) string { return html.EscapeString(s) }

// writeSVG draws c: throughput (MB/s, log scale) against block size (log2
// axis), one polyline per engine, crossovers as labelled dashed lines.
func writeSVG(w io.Writer, c *chart) error {
	a := newAxes(c)
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>`)
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`, width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>`)
	p(`<text x="%d" y="24" font-size="17" font-weight="bold">%s</text>`, marginLeft, esc(c.Title))
	p(`<text x="%d" y="44" font-size="11" fill="#444">%s</text>`, marginLeft, esc(c.Subtitle))
	top, bottom := float64(marginTop), float64(height-marginBottom)
	left, right := float64(marginLeft), float64(width-marginRight)
	// Grid and ticks.
	p(`<g class="grid" stroke="#ddd" stroke-width="1">`)
	for e := int(a.minSize); e <= int(a.maxSize); e++ {
		x := a.x(1 << e)
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x, top, x, bottom)
	}
	for d := int(a.minY); d <= int(a.maxY); d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, float64(d))
			if math.Log10(v) > a.maxY {
				break
			}
			y := a.y(v * 1e6)
			p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, left, y, right, y)
		}
	}
	p(`</g>`)
	p(`<g class="ticks" fill="#333">`)
	for e := int(a.minSize); e <= int(a.maxSize); e++ {
		p(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, a.x(1<<e), bottom+16, sizeLabel(1<<e))
	}
	for d := int(a.minY); d <= int(a.maxY); d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, float64(d))
			if math.Log10(v) > a.maxY {
				break
			}
			p(`<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`, left-6, a.y(v*1e6)+4, trimFloat(v))
		}
	}
	p(`</g>`)
	p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`, left, top, right-left, bottom-top)
	p(`<text x="%.1f" y="%.1f" text-anchor="middle">block (frame) size, bytes (log2)</text>`, (left+right)/2, bottom+36)
	p(`<text transform="translate(20 %.1f) rotate(-90)" text-anchor="middle">throughput, MB/s (log10)</text>`, (top+bottom)/2)
	// Crossovers.
	for i, x := range c.Crossovers {
		px := a.x(x.Size)
		label := fmt.Sprintf("%d B: %s → %s", x.Size, x.From, x.To)
		if !x.Exact {
			label = "≈" + label
		}
		p(`<g class="crossover" data-size="%d">`, x.Size)
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" stroke-width="1.5" stroke-dasharray="6 4"/>`, px, top, px, bottom)
		anchor, dx := "end", -4.0
		if px < (left+right)/2 {
			anchor, dx = "start", 4
		}
		p(`<text x="%.1f" y="%.1f" text-anchor="%s" font-size="11">%s</text>`, px+dx, top+14+float64(i)*14, anchor, esc(label))
		p(`</g>`)
	}
	// One polyline per engine, with markers at the measured points.
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		var pts []string
		for _, pt := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", a.x(pt.Size), a.y(pt.BPS)))
		}
		p(`<g class="engine" data-engine="%s">`, esc(s.Engine))
		p(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), col)
		for _, pt := range s.Points {
			p(`<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>%s %d B: %.2f MB/s</title></circle>`,
				a.x(pt.Size), a.y(pt.BPS), col, esc(s.Engine), pt.Size, pt.BPS/1e6)
		}
		p(`</g>`)
	}
	// Legend below the axis label.
	p(`<g class="legend">`)
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		y := bottom + 60 + float64(i)*18
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, left, y-4, left+24, y-4, col)
		label := s.Engine
		if s.Driver != "" {
			label += " (" + s.Driver + ")"
		}
		p(`<text x="%.1f" y="%.1f">%s</text>`, left+32, y, esc(label))
	}
	p(`</g>`)
	p(`</svg>`)
	_, err := io.WriteString(w, b.String())
	return err
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%g", v)
	return s
}
