package main

import (
	"context"
	"fmt"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/measure/bench"
	"github.com/offload-dev/offload/measure/speed"
	"github.com/offload-dev/offload/tunnel/suite"
)

// floorIncludes says what the crypto floor is, for the report.
const floorIncludes = "per byte one seal and one open of a max_frame-sized frame, software engine, " +
	"in this process (measure/speed.FrameCost, one goroutine): the cipher as the record layer calls it " +
	"(engine.Crypt on the software Crypter, encrypt and decrypt) and the tag (record.MAC.Sum, once to seal, " +
	"once to verify); not the record layer's copies (speed.Copies, shown apart), length header, IV derivation, " +
	"tag comparison, buffers, yamux or socket I/O"

// floor is the crypto floor of one offload suite: the CPU s/GB of sealing
// and then opening the same bytes, which the tunnel cannot go below.
type floor struct {
	Tool       string   `json:"tool"`
	Suite      string   `json:"suite"`
	Engine     string   `json:"engine"`
	FrameBytes int      `json:"frame_bytes"`
	CPU        cpuPerGB `json:"cpu_s_per_gb"` // cipher + MAC, seal and open
	Cipher     float64  `json:"cipher_s_per_gb"`
	MAC        float64  `json:"mac_s_per_gb"`
	// Copies is the record layer's user-space copies of each byte as
	// speed.Copies counts them (one to seal, two to open), measured
	// beside the floor but not in CPU.
	Copies   float64 `json:"copies_s_per_gb_not_included"`
	Includes string  `json:"includes"`
}

// measureFloors measures the floor of every offload suite at frame bytes
// per frame, each part for d.
func measureFloors(ctx context.Context, frame int, d time.Duration) ([]floor, error) {
	var out []floor
	for _, ot := range offloadTools {
		s, err := suite.Parse(ot.suite)
		if err != nil {
			return nil, err
		}
		var parts [2][]speed.Part
		for i, dir := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
			macs := []suite.MAC{s.MAC}
			if dir == engine.Decrypt {
				// The tag is the same work either way (open recomputes
				// it): measured once, counted twice.
				macs = []suite.MAC{}
			}
			parts[i], err = speed.FrameCost(ctx, speed.FrameConfig{
				Cipher: s.Cipher, Direction: dir, Sizes: []int{frame}, Duration: d,
				Engines: []engine.Engine{engine.Software{}}, MACs: macs,
			})
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", ot.suite, dir, err)
			}
		}
		f, err := floorFromParts(parts[0], parts[1], s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ot.suite, err)
		}
		f.Tool, f.FrameBytes = ot.name, frame
		out = append(out, f)
	}
	return out, nil
}

// floorFromParts adds up a suite's floor from FrameCost's parts of
// sealing (cipher, MAC, copy) and opening (cipher, copy): the cipher both
// ways plus the MAC twice; the copies, one to seal and two to open
// (speed.Copies), apart.
func floorFromParts(seal, open []speed.Part, s suite.Suite) (floor, error) {
	find := func(parts []speed.Part, kind, name string) (cpuPerGB, error) {
		for _, p := range parts {
			if p.Kind != kind || (name != "" && p.Name != name) {
				continue
			}
			if p.Error != "" {
				return cpuPerGB{}, fmt.Errorf("%s %s: %s", kind, p.Name, p.Error)
			}
			if p.Ops == 0 {
				return cpuPerGB{}, fmt.Errorf("%s %s: no operations measured", kind, p.Name)
			}
			c := perGB(partCPU(p), p.Ops*int64(p.Size))
			return c, nil
		}
		return cpuPerGB{}, fmt.Errorf("no %s %s measured", kind, name)
	}
	var sum [5]cpuPerGB
	var err error
	for i, q := range []struct {
		parts      []speed.Part
		kind, name string
	}{
		{seal, speed.PartCipher, ""}, {open, speed.PartCipher, ""}, {seal, speed.PartMAC, s.MAC.String()},
		{seal, speed.PartCopy, ""}, {open, speed.PartCopy, ""},
	} {
		if sum[i], err = find(q.parts, q.kind, q.name); err != nil {
			return floor{}, err
		}
	}
	encC, decC, mac, sealCopy, openCopy := sum[0], sum[1], sum[2], sum[3], sum[4]
	f := floor{Suite: s.String(), Engine: engine.Software{}.Name(), Includes: floorIncludes}
	f.CPU = cpuPerGB{User: encC.User + decC.User + 2*mac.User, Sys: encC.Sys + decC.Sys + 2*mac.Sys}
	f.Cipher, f.MAC = encC.Total()+decC.Total(), 2*mac.Total()
	f.Copies = float64(speed.Copies(engine.Encrypt))*sealCopy.Total() + float64(speed.Copies(engine.Decrypt))*openCopy.Total()
	return f, nil
}

// partCPU is the CPU time of a part, or its elapsed time as user time
// where the platform cannot tell CPU time (one goroutine: about equal on
// an idle core).
func partCPU(p speed.Part) bench.CPUTime {
	if p.UserCPU+p.SysCPU > 0 {
		return bench.CPUTime{User: p.UserCPU, System: p.SysCPU}
	}
	return bench.CPUTime{User: p.Elapsed}
}
