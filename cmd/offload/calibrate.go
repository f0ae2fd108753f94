package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/selector"
	"github.com/offload-dev/offload/tunnel"
	"github.com/offload-dev/offload/tunnel/record"
)

func init() {
	register(&command{
		Name:  "calibrate",
		Short: "measure every engine over frame sizes and write the profile that engine: auto|hybrid routes by",
		Usage: "[-evp CIPHER|all] [-decrypt|-both] [-seconds F] [-max-frame N] [-o profile.json] [-json]",
		Flags: calibrateFlags,
	})
}

type calibrateOpts struct {
	evp      string
	decrypt  bool
	both     bool
	seconds  float64
	maxFrame int
	out      string
	json     bool
}

func calibrateFlags(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
	var o calibrateOpts
	fs.StringVar(&o.evp, "evp", "aes-256-cbc", "cipher: aes-128|192|256-cbc|ctr, or all")
	fs.BoolVar(&o.decrypt, "decrypt", false, "measure decryption only")
	fs.BoolVar(&o.both, "both", false, "measure encryption and decryption")
	fs.Float64Var(&o.seconds, "seconds", selector.DefaultDuration.Seconds(), "seconds per run at one size (points near a crossover get several runs)")
	fs.IntVar(&o.maxFrame, "max-frame", tunnel.DefaultOptions().MaxFrame, "largest frame size to measure (the tunnel's max_frame)")
	fs.StringVar(&o.out, "o", selector.DefaultPath(), "write the profile here")
	fs.BoolVar(&o.json, "json", false, "print the profile (JSON) instead of the summary")
	return func(ctx context.Context, env *runEnv, args []string) (int, error) {
		if len(args) != 0 || o.seconds <= 0 || (o.decrypt && o.both) || o.out == "" {
			return 2, errUsage
		}
		// The floor every config's max_frame has: a profile measured to
		// less would fit no link.
		if err := record.CheckMaxFrame(o.maxFrame); err != nil {
			return 2, fmt.Errorf("-max-frame %w (a config's max_frame)", err)
		}
		return runCalibrate(ctx, env, o)
	}
}

func runCalibrate(ctx context.Context, env *runEnv, o calibrateOpts) (int, error) {
	var ciphers []engine.Cipher
	if o.evp == "all" {
		ciphers = engine.Ciphers
	} else {
		c, err := engine.ParseCipher(o.evp)
		if err != nil {
			return 2, err
		}
		ciphers = []engine.Cipher{c}
	}
	dirs := []engine.Direction{engine.Encrypt}
	switch {
	case o.both:
		dirs = append(dirs, engine.Decrypt)
	case o.decrypt:
		dirs = []engine.Direction{engine.Decrypt}
	}
	dur := time.Duration(o.seconds * float64(time.Second))
	fmt.Fprintf(env.Stderr, "calibrating %d table(s), %v per run, frames up to %d bytes\n", len(ciphers)*len(dirs), dur, o.maxFrame)
	if note := engine.KernelAFALGNote(); note != "" {
		fmt.Fprintf(env.Stderr, "note: %s\n", note)
	}
	p, err := selector.Calibrate(ctx, selector.Config{
		Ciphers: ciphers, Directions: dirs, MaxFrame: o.maxFrame, Duration: dur,
		Progress: func(pr selector.Progress) {
			head := fmt.Sprintf("[%3d/%3d] %s %-7s %-6s %-28s", pr.Done, pr.Total, pr.Cipher, pr.Direction, pr.Phase, pr.Engine)
			if pr.Err != nil {
				fmt.Fprintf(env.Stderr, "%s failed: %v\n", head, pr.Err)
				return
			}
			fmt.Fprintf(env.Stderr, "%s %6d B %10.2f MB/s\n", head, pr.Size, pr.BPS/1e6)
		},
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return 130, err
		}
		return 1, err
	}
	// Keep other ciphers' tables of a profile that still fits this machine.
	kept := 0
	if old, err := selector.Load(o.out); err == nil && selector.Check(old) == nil && old.MaxFrame == p.MaxFrame {
		for _, t := range old.Tables {
			c, _ := engine.ParseCipher(t.Cipher)
			d := engine.Encrypt
			if t.Direction == engine.Decrypt.String() {
				d = engine.Decrypt
			}
			if _, err := p.Table(c, d); err != nil {
				p.Tables = append(p.Tables, t)
				kept++
			}
		}
	}
	if err := selector.Save(o.out, p); err != nil {
		return 1, err
	}
	fmt.Fprintf(env.Stderr, "profile written to %s", o.out)
	if kept > 0 {
		fmt.Fprintf(env.Stderr, " (kept %d table(s) of other ciphers from it)", kept)
	}
	fmt.Fprintln(env.Stderr)
	if o.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return 0, enc.Encode(p)
	}
	printProfile(env.Stdout, p)
	return 0, nil
}

// printProfile prints, per table, the bands ("software up to 6143 B,
// afalg:x from 6144 B: 2.10x software at 16384 B") and the engines with
// their drivers.
func printProfile(w io.Writer, p *selector.Profile) {
	fmt.Fprintf(w, "profile of %s, %s %s, CPU AES instructions: %s, frames up to %d bytes\n",
		p.Kernel, p.Go, p.GOARCH, yesNo(p.CPUAES), p.MaxFrame)
	for i := range p.Tables {
		t := &p.Tables[i]
		fmt.Fprintf(w, "\n%s %s:\n", t.Cipher, t.Direction)
		for _, line := range bandLines(t) {
			fmt.Fprintf(w, "  %s\n", line)
		}
		if line := trialLine(t.Hybrid); line != "" {
			fmt.Fprintf(w, "  %s\n", line)
		}
		width := 0
		for _, e := range t.Engines {
			width = max(width, len(e.Name))
		}
		for _, e := range t.NotMeasured {
			width = max(width, len(e.Name))
		}
		fmt.Fprintln(w, "  engines:")
		for _, e := range t.Engines {
			switch {
			case e.Unavailable != "":
				fmt.Fprintf(w, "    %-*s [unavailable: %s]\n", width, e.Name, e.Unavailable)
			case e.Failed != "":
				fmt.Fprintf(w, "    %-*s [failed: %s]\n", width, e.Name, e.Failed)
			default:
				fmt.Fprintf(w, "    %-*s %s\n", width, e.Name, describeDriver(*e.Driver))
			}
		}
		for _, e := range t.NotMeasured {
			fmt.Fprintf(w, "    %-*s [not measured: %s]\n", width, e.Name, e.Why)
		}
	}
}

// trialLine describes a hybrid trial: what auto and hybrid did with the
// device loaded, and the verdict that engine: hybrid follows.
func trialLine(h *selector.HybridTrial) string {
	if h == nil {
		return ""
	}
	if h.Failed != "" {
		return fmt.Sprintf("hybrid trial at %d B: failed (%s): hybrid is auto here", h.Size, h.Failed)
	}
	verdict := "not kept: hybrid is auto here"
	if h.Keep {
		verdict = fmt.Sprintf("kept: hybrid hands %s's frames to %s when %d wait and %s is loaded", h.Device, h.CPU, h.Queue, h.Device)
	}
	return fmt.Sprintf("hybrid trial, %d frames of %d B in flight: auto %.1f MB/s, hybrid %.1f MB/s (%.2fx, %d frames to %s, median of %d): %s",
		h.Workers, h.Size, h.AutoBPS/1e6, h.HybridBPS/1e6, h.HybridBPS/max(h.AutoBPS, 1), h.Handed, h.CPU, h.Runs, verdict)
}

// bandLines describes t's bands; an engine's band says how much faster
// than software it was at the band's largest measured size.
func bandLines(t *selector.Table) []string {
	var out []string
	for i, b := range t.Bands {
		var s string
		switch {
		case len(t.Bands) == 1:
			s = fmt.Sprintf("%s at every size (1..%d B)", b.Engine, b.To)
		case i == 0:
			s = fmt.Sprintf("%s up to %d B", b.Engine, b.To)
		case i == len(t.Bands)-1:
			s = fmt.Sprintf("%s from %d B", b.Engine, b.From)
		default:
			s = fmt.Sprintf("%s from %d to %d B", b.Engine, b.From, b.To)
		}
		if b.Engine != engine.SoftwareName {
			var at selector.Point
			for _, pt := range t.Points {
				if pt.Size >= b.From && pt.Size <= b.To {
					at = pt
				}
			}
			if sw := at.BPS[engine.SoftwareName]; sw > 0 {
				s += fmt.Sprintf(": %.2fx software at %d B", at.BPS[b.Engine]/sw, at.Size)
			}
		}
		out = append(out, s)
	}
	if len(t.Bands) == 1 && t.Bands[0].Engine == engine.SoftwareName {
		var others []string
		for _, e := range t.Engines {
			if e.Name != engine.SoftwareName && e.Usable() {
				others = append(others, e.Name)
			}
		}
		if len(others) > 0 {
			out = append(out, "no crossover: software beats "+strings.Join(others, ", ")+" at every measured size")
		} else {
			out = append(out, "no other engine could be measured (see engines)")
		}
	}
	return out
}
