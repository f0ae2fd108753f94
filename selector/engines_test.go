package selector

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Engines builds each kind of spec: software alone, auto from a profile it
// measures, a named kernel engine pinned or refused with its reason, and
// an unknown spec refused.
func TestEngines(t *testing.T) {
	ctx := context.Background()
	engines, policy, err := Engines(ctx, "software", suite.Default.Cipher, EngineOptions{Logger: zap.NewNop()})
	if err != nil || len(engines) != 1 || policy.Pick(100, engine.Encrypt) != 0 {
		t.Fatalf("software: %v %v %v", engines, policy, err)
	}
	// auto goes to the selector: with a fresh profile path it measures
	// this machine, and every engine it returns starts with software.
	profile := filepath.Join(t.TempDir(), "profile.json")
	engines, policy, err = Engines(ctx, "auto", suite.Default.Cipher, EngineOptions{Profile: profile, Stats: new(record.Stats)})
	if err != nil || len(engines) == 0 || engines[0].Name() != engine.SoftwareName || policy.Pick(16, engine.Encrypt) != 0 {
		t.Fatalf("auto: %v %v %v", engines, policy, err)
	}
	if _, err := os.Stat(profile); err != nil {
		t.Errorf("auto did not save its profile: %v", err)
	}
	for _, spec := range []string{"bogus", "software:x", "cryptodev:x", "afalg:"} {
		if _, _, err := Engines(ctx, spec, suite.Default.Cipher, EngineOptions{}); !errors.Is(err, engine.ErrUnknownEngine) {
			t.Errorf("%q: %v, want ErrUnknownEngine", spec, err)
		}
	}
	// A driver no kernel has: the engine's reason, no fallback.
	if _, _, err := Engines(ctx, "afalg:no-such-driver-xyz", suite.Default.Cipher, EngineOptions{}); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("afalg:no-such-driver-xyz: %v, want ErrUnavailable", err)
	}
	// Whatever this machine has, a kernel engine is either set up pinned
	// to index 1 or refused with ErrUnavailable.
	for _, spec := range []string{"afalg", "cryptodev"} {
		engines, policy, err := Engines(ctx, spec, suite.Default.Cipher, EngineOptions{})
		switch {
		case err == nil:
			if len(engines) != 2 || engines[1].Name() != spec || policy.Pick(16384, engine.Decrypt) != 1 {
				t.Errorf("%s: engines %v", spec, engines)
			}
		case !errors.Is(err, engine.ErrUnavailable):
			t.Errorf("%s: %v, want nil or ErrUnavailable", spec, err)
		default:
			t.Logf("%s: %v", spec, err)
		}
	}
}
