package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
	"github.com/offload-dev/offload/measure/ratio"
	"github.com/offload-dev/offload/measure/speed"
)

// The progress lines and the table must read like openssl's so the seeds'
// tables compare line by line.
func TestSpeedOpenSSLFormat(t *testing.T) {
	code, out, errs := runCmd(t, "speed", "-evp", "aes-128-ctr", "-elapsed", "-seconds", "1", "-bytes", "64", "-multi", "2")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "You have chosen to measure elapsed time instead of user CPU time.") {
		t.Errorf("no elapsed notice in %q", errs)
	}
	doing := regexp.MustCompile(`(?m)^Doing aes-128-ctr for 1s on 64 size blocks: (\d+) aes-128-ctr's in (\d+\.\d\d)s$`)
	m := doing.FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("no Doing line in %q", errs)
	}
	ops, _ := strconv.ParseInt(m[1], 10, 64)
	secs, _ := strconv.ParseFloat(m[2], 64)
	if ops <= 0 || secs < 1 || secs > 5 {
		t.Errorf("Doing line: %d ops in %vs", ops, secs)
	}
	if !strings.Contains(out, "The 'numbers' are in 1000s of bytes per second processed.") {
		t.Errorf("no numbers line:\n%s", out)
	}
	row := regexp.MustCompile(`(?m)^aes-128-ctr\s+(\d+\.\d\d)k$`).FindStringSubmatch(out)
	if row == nil {
		t.Fatalf("no table row:\n%s", out)
	}
	// The row is the Doing line's figure: ops*64 bytes / seconds / 1000.
	k, _ := strconv.ParseFloat(row[1], 64)
	want := float64(ops) * 64 / secs / 1000
	if k < want*0.98 || k > want*1.02 {
		t.Errorf("table says %.2fk, Doing line implies %.2fk", k, want)
	}
	if !regexp.MustCompile(`(?m)^type\s+64 bytes$`).MatchString(out) {
		t.Errorf("no type header:\n%s", out)
	}
}

func TestSpeedJSON(t *testing.T) {
	code, out, errs := runCmd(t, "speed", "-evp", "aes-256-cbc", "-decrypt", "-elapsed", "-seconds", "1", "-bytes", "1024", "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep speedReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	if rep.Cipher != "aes-256-cbc" || rep.Direction != "decrypt" || len(rep.Engines) != 1 {
		t.Fatalf("report %+v", rep)
	}
	e := rep.Engines[0]
	if e.Engine != "software" || !e.Available || e.Driver == nil || len(e.Results) != 1 || e.Results[0].Size != 1024 || e.Results[0].Ops <= 0 {
		t.Fatalf("engine run %+v", e)
	}
}

func TestSpeedAllListsEveryEngine(t *testing.T) {
	code, out, errs := runCmd(t, "speed", "-engine", "all", "-elapsed", "-seconds", "1", "-bytes", "16", "-json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep speedReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]engineRun{}
	for _, e := range rep.Engines {
		got[e.Engine] = e
	}
	// Every engine of the registry, so that a new one cannot be left out
	// (afalg-aead once was): measured, unavailable with its reason, or
	// not measured with why.
	for _, f := range engine.Families() {
		e, ok := got[f.Name]
		if !ok {
			t.Errorf("engine %s missing from -engine all", f.Name)
			continue
		}
		if !e.Available && e.Unavailable == "" && e.NotMeasured == "" {
			t.Errorf("engine %s unavailable without a reason", f.Name)
		}
		if (e.NotMeasured != "") != (f.Kind == engine.KindFrame) {
			t.Errorf("engine %s (kind %v): not measured %q", f.Name, f.Kind, e.NotMeasured)
		}
	}
}

func TestSpeedErrors(t *testing.T) {
	if code, _, errs := runCmd(t, "speed", "-engine", "nosuch"); code != 2 || !strings.Contains(errs, "unknown engine") {
		t.Errorf("unknown engine: exit %d, %q", code, errs)
	}
	if code, _, errs := runCmd(t, "speed", "-evp", "des-cbc"); code != 2 || !strings.Contains(errs, "unknown cipher") {
		t.Errorf("unknown cipher: exit %d, %q", code, errs)
	}
	if code, _, _ := runCmd(t, "speed", "-seconds", "0"); code != 2 {
		t.Errorf("-seconds 0: exit %d", code)
	}
	if code, _, errs := runCmd(t, "speed", "-evp", "aes-128-cbc", "-bytes", "100", "-seconds", "1"); code != 1 || !strings.Contains(errs, "multiple of the block size") {
		t.Errorf("CBC -bytes 100: exit %d, %q", code, errs)
	}
	// An explicitly named engine that is unavailable is an error with the
	// reason, never a silent run on another engine.
	c := engine.Cipher{Mode: engine.CBC, KeyBits: 256}
	if _, err := engine.NewCryptodev(engine.Options{}).Driver(c); err != nil {
		code, out, errs := runCmd(t, "speed", "-engine", "cryptodev", "-seconds", "1")
		if code != 1 || !strings.Contains(errs, "cryptodev") || out != "" {
			t.Errorf("unavailable cryptodev: exit %d, out %q, err %q", code, out, errs)
		}
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("cryptodev error %v does not wrap ErrUnavailable", err)
		}
	}
}

func TestEngines(t *testing.T) {
	code, out, errs := runCmd(t, "engines")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"(software) Go crypto/aes on the CPU", "(afalg) ", "(cryptodev) ", "aes-256-ctr  go/"} {
		if !strings.Contains(out, want) {
			t.Errorf("engines output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`\[ (available|unavailable: .+) \]`).MatchString(out) {
		t.Errorf("no availability lines:\n%s", out)
	}
	code, out, _ = runCmd(t, "engines", "-json")
	var list []engineInfo
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) < 3 {
		t.Fatalf("engines -json: exit %d\n%s", code, out)
	}
	for _, e := range list {
		if len(e.Ciphers) != len(engine.Ciphers) {
			t.Errorf("%s: %d ciphers", e.Engine, len(e.Ciphers))
		}
		for _, c := range e.Ciphers {
			if (c.Driver == nil) == (c.Unavailable == "") {
				t.Errorf("%s %s: want exactly one of driver or reason: %+v", e.Engine, c.Cipher, c)
			}
		}
	}
}

func TestSpeedCost(t *testing.T) {
	code, out, errs := runCmd(t, "speed", "-evp", "aes-128-ctr", "-elapsed", "-seconds", "1", "-bytes", "1024", "-cost")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"aes-128-ctr ", "Where the time of one aes-128-ctr frame goes", "mac hmac-sha256", "mac poly1305", "frame = cipher + mac"} {
		if !strings.Contains(out, want) {
			t.Errorf("speed -cost output lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := runCmd(t, "speed", "-cost", "-json"); code != 2 || !strings.Contains(errs, "frame-cost -json") {
		t.Errorf("-cost -json: exit %d, %q", code, errs)
	}
}

// Named ciphers print openssl 1.x's low-level labels ("aes-128 cbc"), the
// -evp one its EVP name, all in one table, in the order openssl uses
// (named ones first); ECB is measured but not for the tunnel.
func TestSpeedNamedCiphers(t *testing.T) {
	code, out, errs := runCmd(t, "speed", "-elapsed", "-seconds", "1", "-bytes", "32", "aes-128-cbc", "aes-192-ecb", "-evp", "aes-256-ecb")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, label := range []string{"aes-128 cbc", "aes-192 ecb", "aes-256-ecb"} {
		doing := regexp.MustCompile(`(?m)^Doing ` + label + ` for 1s on 32 size blocks: \d+ ` + label + `'s in \d+\.\d\ds$`)
		if !doing.MatchString(errs) {
			t.Errorf("no Doing line for %q in\n%s", label, errs)
		}
	}
	rows := regexp.MustCompile(`(?m)^(aes-\S+(?: \S+)?)\s+\d+\.\d\dk$`).FindAllStringSubmatch(out, -1)
	var got []string
	for _, r := range rows {
		got = append(got, r[1])
	}
	if strings.Join(got, ",") != "aes-128 cbc,aes-192 ecb,aes-256-ecb" {
		t.Errorf("rows %q, want aes-128 cbc, aes-192 ecb, aes-256-ecb in that order:\n%s", got, out)
	}
	if !strings.Contains(out, "  aes-192 ecb software ") {
		t.Errorf("drivers section does not name the cipher:\n%s", out)
	}

	// "aes" is the three AES-CBC key sizes, as openssl reads it; -json
	// gives one report per cipher.
	code, out, errs = runCmd(t, "speed", "-seconds", "1", "-bytes", "16", "-json", "aes")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var reps []speedReport
	if err := json.Unmarshal([]byte(out), &reps); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	if len(reps) != 3 || reps[0].Cipher != "aes-128-cbc" || reps[2].Cipher != "aes-256-cbc" {
		t.Errorf("reports %+v", reps)
	}

	if code, _, errs := runCmd(t, "speed", "-seconds", "1", "aes-128-xts"); code != 2 || !strings.Contains(errs, "unknown cipher") {
		t.Errorf("unknown named cipher: exit %d, %q", code, errs)
	}
	if code, _, errs := runCmd(t, "speed", "-cost", "aes-128-cbc"); code != 2 || !strings.Contains(errs, "-cost") {
		t.Errorf("-cost with named ciphers: exit %d, %q", code, errs)
	}
}

// -tcrypt prints tcrypt's lines (seed 004): a header per mode and
// direction naming the driver that served, then the tests numbered over
// key sizes and block sizes, bytes = operations x block size.
func TestSpeedTcrypt(t *testing.T) {
	code, out, errs := runCmd(t, "speed", "-tcrypt", "-seconds", "1", "-bytes", "1472", "ecb(aes)")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	d, _ := engine.Software{}.Driver(engine.Cipher{Mode: engine.ECB, KeyBits: 128})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 10 {
		t.Fatalf("%d lines, want 2 x (2 header + 3 tests):\n%s", len(lines), out)
	}
	test := regexp.MustCompile(`^tcrypt: test (\d+) \((\d+) bit key, (\d+) byte blocks\): (\d+) operations in 1 seconds \((\d+) bytes\)$`)
	for i, dir := range []string{"encryption", "decryption"} {
		block := lines[i*5 : i*5+5]
		if block[0] != "tcrypt:" || block[1] != "testing speed of sync ecb(aes) ("+d.Name+") "+dir {
			t.Errorf("header %q", block[:2])
		}
		for j, l := range block[2:] {
			m := test.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("line %q", l)
			}
			ops, _ := strconv.ParseInt(m[4], 10, 64)
			bytes, _ := strconv.ParseInt(m[5], 10, 64)
			if m[1] != strconv.Itoa(j) || m[2] != strconv.Itoa(128+64*j) || m[3] != "1472" || ops <= 0 || bytes != ops*1472 {
				t.Errorf("line %q", l)
			}
		}
	}
	for _, args := range [][]string{{"-tcrypt", "-json"}, {"-tcrypt", "-evp", "aes-128-cbc"}, {"-tcrypt", "-decrypt"}, {"-tcrypt", "xts"}} {
		if code, _, _ := runCmd(t, append([]string{"speed"}, args...)...); code != 2 {
			t.Errorf("speed %q: exit %d, want 2", args, code)
		}
	}
}

// An engine that cannot serve a cipher gets tcrypt's "failed to load
// transform" line with the reason, and the run goes on.
func TestTcryptBlockUnavailable(t *testing.T) {
	var buf strings.Builder
	e := engine.NewCryptodev(engine.Options{})
	if _, err := e.Driver(engine.Cipher{Mode: engine.CBC, KeyBits: 128}); err == nil {
		t.Skip("cryptodev serves cbc(aes) here")
	}
	n, err := tcryptBlock(context.Background(), &buf, e, engine.CBC, engine.Encrypt, []int{16}, time.Millisecond)
	if n != 0 || err != nil {
		t.Fatalf("measured %d, %v", n, err)
	}
	if got := strings.Count(buf.String(), "tcrypt: failed to load transform for cbc(aes) ("); got != 3 {
		t.Errorf("%d failed-to-load lines, want one per key size:\n%s", got, buf.String())
	}
}

// With -repeat every round of every engine is kept, the table shows the
// median per size, and each band its narrowest lead (here software
// against a second software engine under another name).
func TestSpeedRepeatLeads(t *testing.T) {
	twin := &enginetest.Faulty{Label: "twin", Bad: func(uint64) bool { return false }}
	rep := &speedReport{sizes: []int{16}, label: "aes-128-cbc", Elapsed: true}
	var progress strings.Builder
	o := speedOpts{seconds: 1, multi: 1, repeat: 3, elapsed: true}
	sc := speedCipher{engine.Cipher{Mode: engine.CBC, KeyBits: 128}, "aes-128-cbc"}
	n, _, err := speedCipherRun(context.Background(), &progress, o, sc, engine.Encrypt, []engine.Engine{engine.Software{}, twin}, rep)
	if err != nil || n != 2 {
		t.Fatalf("measured %d, %v", n, err)
	}
	for _, r := range rep.Engines {
		if len(r.Rounds) != 3 || len(r.Results) != 1 {
			t.Errorf("%s: %d rounds, %d results; want 3 and the median", r.Engine, len(r.Rounds), len(r.Results))
		}
	}
	if len(rep.Bands) != 1 || rep.Bands[0].Lead == nil || rep.Bands[0].Lead.Rounds != 3 {
		t.Fatalf("bands %+v, want one with a lead over 3 rounds", rep.Bands)
	}
	if !strings.Contains(progress.String(), "round 3 of 3:") {
		t.Errorf("progress:\n%s", progress.String())
	}
}

// A crossover whose leads straddle 1.00x is not presented as a sure one.
func TestSpeedTableSpread(t *testing.T) {
	res := []speed.Result{{Size: 16, Ops: 100, Elapsed: time.Second}, {Size: 64, Ops: 100, Elapsed: time.Second}}
	clear := &ratio.Paired{Median: 2, Low: 1.6, High: 2.5, Rounds: 3}
	spread := &ratio.Paired{Median: 1.03, Low: 0.91, High: 1.12, Rounds: 3}
	rep := &speedReport{sizes: []int{16, 64}, label: "aes-256-cbc", Elapsed: true,
		Engines: []engineRun{{Engine: "software", Results: res}, {Engine: "afalg", Results: res}},
		Bands: []speed.Band{
			{From: 16, To: 16, Engine: "software", Lead: clear, LeadOver: "afalg", LeadSize: 16, FromLead: clear, ToLead: clear},
			{From: 64, To: 64, Engine: "afalg", Lead: spread, LeadOver: "software", LeadSize: 64, FromLead: spread, ToLead: spread},
		}}
	var b strings.Builder
	printSpeedTable(&b, []*speedReport{rep})
	out := b.String()
	for _, want := range []string{
		"software (closest: 2.00x afalg at 16 bytes)",
		"afalg (closest: 1.03x (within spread 0.91–1.12) software at 64 bytes: no clear winner there)",
		"crossover: afalg overtakes software between 16 and 64 bytes, within spread",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// -sizes takes Linux 6.1's tcrypt sizes too; like tcrypt, -tcrypt rounds a
// size up to the block size for CBC and ECB (1420 bytes are 1424) and not
// for CTR.
func TestSpeedTcryptSizes(t *testing.T) {
	code, out, errs := runCmd(t, "speed", "-tcrypt", "-seconds", "1", "-sizes", "1420", "cbc", "ctr")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if n := strings.Count(out, "(128 bit key, 1424 byte blocks)"); n != 2 {
		t.Errorf("%d cbc lines at 1424 bytes, want 2 (encryption, decryption):\n%s", n, out)
	}
	if n := strings.Count(out, "(128 bit key, 1420 byte blocks)"); n != 2 {
		t.Errorf("%d ctr lines at 1420 bytes, want 2:\n%s", n, out)
	}
	for _, args := range [][]string{{"-bytes", "16", "-sizes", "16"}, {"-sizes", "16,x"}, {"-sizes", "0"}} {
		if code, _, _ := runCmd(t, append([]string{"speed", "-seconds", "1"}, args...)...); code != 2 {
			t.Errorf("speed %q: exit %d, want 2", args, code)
		}
	}
}
