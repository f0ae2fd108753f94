package selector

import (
	"fmt"

	"github.com/offload-dev/offload/engine"
)

// The selector's part of the engine spec: its two policies on top of the
// engine registry's specs (engine.ParseSpec). A config's engine:, bench's
// -policy and Engines all go through CheckSpec, so what validates is
// exactly what runs.

// IsPolicy reports whether spec names one of the selector's policies
// (auto, hybrid) rather than a single engine.
func IsPolicy(spec string) bool { return spec == SpecAuto || spec == SpecHybrid }

// Specs is every spec Engines accepts, for help texts: the engine
// registry's specs, then auto and hybrid.
func Specs() string { return engine.Specs + ", " + SpecAuto + ", " + SpecHybrid }

// CheckSpec validates an engine spec as Engines will take it: auto,
// hybrid, or a spec of the engine registry. Errors wrap
// engine.ErrUnknownEngine. It does not check that the engine is
// available: that is Engines' job, on the machine that runs it.
func CheckSpec(spec string) error {
	if IsPolicy(spec) {
		return nil
	}
	if _, err := engine.ParseSpec(spec); err != nil {
		return fmt.Errorf("%w (or %s, %s)", err, SpecAuto, SpecHybrid)
	}
	return nil
}

// AllPolicies is what "all" means for a list of policies to run (bench
// -policy all): software, every engine engine.All lists for c (frame
// engines included), auto and hybrid, each once.
func AllPolicies(c engine.Cipher) []string {
	out := []string{engine.SoftwareName}
	seen := map[string]bool{engine.SoftwareName: true}
	for _, e := range engine.All(c, engine.Options{}) {
		if !seen[e.Name()] {
			seen[e.Name()] = true
			out = append(out, e.Name())
		}
	}
	return append(out, SpecAuto, SpecHybrid)
}
