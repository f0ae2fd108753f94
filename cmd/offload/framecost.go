package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/sysinfo"
	"github.com/offload-dev/offload/measure/speed"
	"github.com/offload-dev/offload/tunnel/suite"
)

func init() {
	register(&command{
		Name:  "frame-cost",
		Short: "show where a frame's time goes: cipher per engine, MAC per MAC, copies, system calls",
		Usage: "[-evp CIPHER] [-engine SPEC|all] [-mac " + strings.Join(suite.MACNames(), "|") + "|all] [-time D] [-bytes N] [-decrypt] [-json]",
		Flags: frameCostFlags,
	})
}

type frameCostOpts struct {
	evp     string
	engine  string
	mac     string
	time    time.Duration
	bytes   int
	decrypt bool
	json    bool
}

func frameCostFlags(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
	var o frameCostOpts
	fs.StringVar(&o.evp, "evp", "aes-256-cbc", "cipher: aes-128|192|256-cbc|ctr")
	fs.StringVar(&o.engine, "engine", "all", "engine: "+engine.Specs+", or all (every engine and driver found)")
	fs.StringVar(&o.mac, "mac", "all", "MAC: "+strings.Join(suite.MACNames(), ", ")+", or all")
	fs.DurationVar(&o.time, "time", 500*time.Millisecond, "time per part and frame size")
	fs.IntVar(&o.bytes, "bytes", 0, "measure only this frame size")
	fs.BoolVar(&o.decrypt, "decrypt", false, "measure opening frames (decryption, two copies)")
	fs.BoolVar(&o.json, "json", false, "print JSON for machines instead of the table")
	return func(ctx context.Context, env *runEnv, args []string) (int, error) {
		if len(args) != 0 || o.time <= 0 || o.bytes < 0 {
			return 2, errUsage
		}
		return runFrameCost(ctx, env, o)
	}
}

// frameCostReport is the -json document.
type frameCostReport struct {
	Offload   string           `json:"offload"`
	Go        string           `json:"go"`
	Platform  string           `json:"platform"`
	Kernel    string           `json:"kernel"`
	CPUAES    bool             `json:"cpu_aes"`
	Cipher    string           `json:"cipher"`
	Direction string           `json:"direction"`
	Copies    int              `json:"copies_per_frame"`
	Parts     []speed.Part     `json:"parts"`
	Estimates []speed.Estimate `json:"estimates"`
}

func runFrameCost(ctx context.Context, env *runEnv, o frameCostOpts) (int, error) {
	c, err := engine.ParseCipher(o.evp)
	if err != nil {
		return 2, err
	}
	macs := suite.MACs
	if o.mac != "all" {
		m, err := suite.ParseMAC(o.mac)
		if err != nil {
			return 2, err
		}
		macs = []suite.MAC{m}
	}
	dir := engine.Encrypt
	if o.decrypt {
		dir = engine.Decrypt
	}
	engines, code, err := pickEngines(o.engine, c)
	if err != nil {
		return code, err
	}
	var sizes []int
	if o.bytes > 0 {
		sizes = []int{o.bytes}
	}
	parts, err := speed.FrameCost(ctx, speed.FrameConfig{
		Cipher: c, Direction: dir, Sizes: sizes, Duration: o.time, Engines: engines, MACs: macs,
		Start: func(kind, name string, size int) {
			if !o.json {
				fmt.Fprintf(env.Stderr, "Doing %s %s on %d-byte frames\n", kind, name, size)
			}
		},
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return 130, err
		}
		return 1, err
	}
	est, err := speed.Estimates(parts, dir)
	if err != nil {
		return 1, fmt.Errorf("no engine could be measured: %w", err)
	}
	rep := frameCostReport{
		Offload: version(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Kernel: sysinfo.Kernel(), CPUAES: engine.HardwareAES(), Cipher: c.String(), Direction: dir.String(),
		Copies: speed.Copies(dir), Parts: parts, Estimates: est,
	}
	if o.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return 0, enc.Encode(rep)
	}
	printFrameCost(env.Stdout, &rep)
	return 0, nil
}

// printFrameCost prints, per frame size, each part's time per frame, then
// every engine × MAC combination with its estimated throughput on one core
// and its bottleneck.
func printFrameCost(w io.Writer, rep *frameCostReport) {
	fmt.Fprintf(w, "offload %s %s %s, kernel %s, CPU AES instructions: %v\n", rep.Offload, rep.Go, rep.Platform, rep.Kernel, yesNo(rep.CPUAES))
	fmt.Fprintf(w, "Where the time of one %s frame goes (%s, one core). sys = kernel CPU time per frame; calls and switches per frame.\n", rep.Cipher, rep.Direction)
	size := -1
	for _, p := range rep.Parts {
		if p.Size != size {
			size = p.Size
			fmt.Fprintf(w, "\n%d-byte frames\n  %-36s %12s %10s %10s %7s %8s\n", size, "part", "ns/frame", "MB/s", "sys ns", "calls", "switches")
		}
		name := p.Kind + " " + p.Name
		if p.Driver != "" && p.Driver != p.Name {
			name += " (" + p.Driver + ")"
		}
		if p.Error != "" {
			fmt.Fprintf(w, "  %-36s [%s]\n", name, p.Error)
			continue
		}
		calls := "-"
		if n := p.SyscallsPerFrame(); n >= 0 {
			calls = fmt.Sprintf("%.1f", n)
		}
		fmt.Fprintf(w, "  %-36s %12.0f %10.1f %10.0f %7s %8.2f\n", name, p.NsPerFrame(), p.BytesPerSecond()/1e6, p.SysNsPerFrame(), calls, p.SwitchesPerFrame())
		if p.Kind == speed.PartMAC && isLastPart(rep.Parts, p) {
			fmt.Fprintf(w, "  frame = cipher + mac + %d copy(ies):\n", rep.Copies)
			for _, e := range rep.Estimates {
				if e.Size != size {
					continue
				}
				fmt.Fprintf(w, "    %-34s %12.0f %10.1f   bottleneck %s (%.0f%%)\n", e.Engine+" + "+e.MAC, e.Total(), e.BytesPerSecond()/1e6, e.Bottleneck, 100*e.Share(e.Bottleneck))
			}
		}
	}
}

// isLastPart reports whether p is the last part of its size.
func isLastPart(parts []speed.Part, p speed.Part) bool {
	last := -1
	for i, q := range parts {
		if q.Size == p.Size {
			last = i
		}
	}
	return last >= 0 && parts[last] == p
}
