package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
)

func TestClassifyDriver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		async bool
		hw    bool
		why   string // a part of HardwareWhy naming the rule that decided
	}{
		// x86: the aesni simd wrappers are async but CPU code.
		{"cbc-aes-aesni", true, false, "AES-NI"},
		{"__cbc-aes-aesni", false, false, "AES-NI"},
		{"cryptd(__cbc-aes-aesni)", true, false, "AES-NI"},
		{"ctr-aes-aesni-avx", true, false, "AES-NI"},
		{"cbc(aes-generic)", false, false, "generic C code"},
		{"cbc(ecb(aes-fixed-time))", false, false, "fixed-time"},
		{"ctr(aes-asm)", false, false, "x86 assembly"},
		// arm and arm64 CPU code.
		{"ctr-aes-ce", false, false, "ARMv8 Cryptography Extensions"},
		{"cbc-aes-neon", false, false, "NEON"},
		{"cbc-aes-neonbs", true, false, "bit-sliced"},
		{"cbc(aes-arm)", false, false, "ARM assembly"},
		{"cbc-aes-arm64", false, false, "ARM64 assembly"},
		// other CPU code, on-core instruction units included.
		{"p8_aes_cbc", false, false, "POWER8"},
		{"cbc-ppc-spe", false, false, "PowerPC"},
		{"cbc-aes-s390", false, false, "CPACF"},
		{"cbc-aes-padlock", false, false, "PadLock"},
		// devices, including names that look like CPU code.
		{"virtio_crypto_aes_cbc", true, true, "virtio-crypto"},
		{"cbc-aes-sun8i-ce", true, true, "Allwinner"},
		{"cbc-aes-sun4i-ss", false, true, "Allwinner"},
		{"ifxdeu-cbc(aes)", false, true, "Lantiq"},
		{"cbc(aes-eip93)", true, true, "EIP-93"},
		{"safexcel-cbc-aes", true, true, "SafeXcel"},
		{"cbc-aes-caam", true, true, "CAAM"},
		{"cbc-aes-talitos", true, true, "talitos"},
		{"atmel-cbc-aes", true, true, "Atmel"},
		{"cbc-aes-omap", true, true, "OMAP"},
		{"cbc-aes-dcp", true, true, "DCP"},
		{"cbc-aes-gxl", true, true, "Amlogic"},
		{"cbc-aes-rk", true, true, "Rockchip"},
		{"stm32-cbc-aes", true, true, "STM32"},
		{"cbc(aes)-ixp4xx", true, true, "IXP4xx"},
		{"mv-cbc-aes", true, true, "Marvell"},
		{"cbc-aes-ccp", true, true, "AMD"},
		{"qat_aes_cbc", true, true, "QuickAssist"},
		{"mtk-aes-cbc", true, true, "MediaTek"},
		{"cbc-aes-qce", true, true, "Qualcomm"},
		// templates: hardware when what they wrap is.
		{"cbc(virtio_crypto_aes_ecb)", true, true, "virtio-crypto"},
		{"cryptd(cbc-aes-sun8i-ce)", true, true, "Allwinner"},
		{"cbc(foo-aes)", true, true, "template cbc wraps \"foo-aes\" is an unknown async driver"},
		{"cryptd(foo-aes)", true, false, "template cryptd wraps \"foo-aes\" is an unknown synchronous driver"},
		{"cbc(foo-aes)", false, false, "template cbc wraps"},
		// unknown names: async means a device queue.
		{"acme_cbc_aes", true, true, "unknown async driver, assumed device"},
		{"acme_cbc_aes", false, false, "unknown synchronous driver, assumed CPU"},
		// not templates: unbalanced parentheses.
		{"cbc(foo", true, true, "assumed device"},
		{"cbc()", false, false, "assumed CPU"},
	} {
		hw, why := engine.ClassifyDriver(tc.name, tc.async)
		if hw != tc.hw || !strings.Contains(why, tc.why) {
			t.Errorf("ClassifyDriver(%q, async=%v) = %v, %q; want %v and a reason with %q", tc.name, tc.async, hw, why, tc.hw, tc.why)
		}
	}
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseProcCryptoFixtures parses /proc/crypto as captured: this
// machine's 6.18 kernel (lskcipher, no AF_ALG) and Debian's 6.1 kernel in the
// VM with aesni and virtio-crypto loaded.
func TestParseProcCryptoFixtures(t *testing.T) {
	cbc, ctr := engine.Cipher{Mode: engine.CBC, KeyBits: 256}, engine.Cipher{Mode: engine.CTR, KeyBits: 256}
	for _, tc := range []struct {
		file     string
		records  int
		cbc, ctr []string // SkcipherDrivers, in order
		bound    map[string]string
	}{
		{
			file: "proc-crypto-host-6.18.txt", records: 56,
			cbc: []string{"cbc(ecb(aes-fixed-time))"}, ctr: nil,
			bound: map[string]string{"cbc(aes)": "cbc(ecb(aes-fixed-time))"},
		},
		{
			file: "proc-crypto-vm-6.1-amd64.txt", records: 49,
			cbc: []string{"cbc-aes-aesni", "virtio_crypto_aes_cbc"}, ctr: []string{"ctr-aes-aesni"},
			bound: map[string]string{"cbc(aes)": "cbc-aes-aesni", "ctr(aes)": "ctr-aes-aesni"},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			algs, err := engine.ParseProcCrypto(bytes.NewReader(readFixture(t, tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			if tc.records >= 0 && len(algs) != tc.records {
				t.Errorf("%d records, want %d", len(algs), tc.records)
			}
			for _, a := range algs {
				if a.Name == "" || a.Driver == "" || a.Type == "" {
					t.Errorf("incomplete record %+v", a)
				}
			}
			for c, want := range map[engine.Cipher][]string{cbc: tc.cbc, ctr: tc.ctr} {
				var got []string
				for _, d := range engine.SkcipherDrivers(algs, c.KernelName()) {
					got = append(got, d.Name)
					if d.Algorithm != c.KernelName() || d.Module == "" || d.HardwareWhy == "" {
						t.Errorf("%s: incomplete driver %+v", c.KernelName(), d)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("SkcipherDrivers(%s) = %q, want %q", c.KernelName(), got, want)
				}
			}
			for name, want := range tc.bound {
				d, ok := engine.BoundDriver(algs, name)
				if !ok || d.Name != want {
					t.Errorf("BoundDriver(%s) = %q, %v; want %q", name, d.Name, ok, want)
				}
			}
			if tc.file == "proc-crypto-vm-6.1-amd64.txt" {
				for _, d := range engine.SkcipherDrivers(algs, "cbc(aes)") {
					want := strings.HasPrefix(d.Name, "virtio_crypto")
					if d.Hardware != want || d.Priority == 0 || !d.Async {
						t.Errorf("%+v: want hardware=%v, a priority, async", d, want)
					}
				}
			}
		})
	}
}

// procCryptoSample is made up to exercise the rules: an internal driver, a
// larval duplicate, an untested driver and a legacy (pre-4.20) type.
const procCryptoSample = `name         : cbc(aes)
driver       : __cbc-aes-aesni
module       : aesni_intel
priority     : 400
internal     : yes
type         : skcipher
async        : no

name         : cbc(aes)
driver       : cbc-aes-aesni
module       : aesni_intel
priority     : 400
selftest     : passed
internal     : no
type         : skcipher
async        : yes

name         : cbc(aes)
driver       : cbc-aes-aesni
module       : aesni_intel
priority     : 400
selftest     : passed
internal     : no
type         : skcipher
async        : yes

name         : cbc(aes)
driver       : acme-cbc-aes
module       : acme
priority     : 1000
selftest     : unknown
internal     : no
type         : skcipher
async        : yes

name         : cbc(aes)
driver       : ifxdeu-cbc(aes)
module       : kernel
priority     : 400
type         : blkcipher

name         : aes
driver       : aes-generic
module       : kernel
priority     : 100
type         : cipher
`

func TestSkcipherDriversRules(t *testing.T) {
	algs, err := engine.ParseProcCrypto(strings.NewReader(procCryptoSample))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range engine.SkcipherDrivers(algs, "cbc(aes)") {
		got = append(got, d.Name)
	}
	// Highest priority first, ties by name; internal and cipher types
	// excluded; the duplicate listed once.
	want := []string{"acme-cbc-aes", "cbc-aes-aesni", "ifxdeu-cbc(aes)"}
	if !slices.Equal(got, want) {
		t.Errorf("SkcipherDrivers = %q, want %q", got, want)
	}
	// The untested acme driver is not what the kernel binds.
	if d, ok := engine.BoundDriver(algs, "cbc(aes)"); !ok || d.Name != "cbc-aes-aesni" || d.Hardware {
		t.Errorf("BoundDriver = %+v, %v; want cbc-aes-aesni on the CPU", d, ok)
	}
	if d, ok := engine.BoundDriver(algs, "ctr(aes)"); ok {
		t.Errorf("BoundDriver(ctr(aes)) = %+v, want none", d)
	}
}

func TestParseProcCryptoErrors(t *testing.T) {
	for _, text := range []string{
		"name : cbc(aes)\ndriver : x\npriority : high\n",
		"name : cbc(aes)\nthis line has no colon\n",
		"name : cbc(aes)\nmodule : kernel\n\nname : ctr(aes)\ndriver : y\n",
		"driver : x\n",
	} {
		algs, err := engine.ParseProcCrypto(strings.NewReader(text))
		if !errors.Is(err, engine.ErrProcFormat) {
			t.Errorf("ParseProcCrypto(%q) = %v, %v; want ErrProcFormat", text, algs, err)
		} else if !strings.Contains(err.Error(), "line ") {
			t.Errorf("error %q does not name the line", err)
		}
	}
	if algs, err := engine.ParseProcCrypto(strings.NewReader("\n\n")); err != nil || len(algs) != 0 {
		t.Errorf("empty text: %v, %v", algs, err)
	}
}

// formatProcCrypto writes algs the way the kernel does, for the round trip.
func formatProcCrypto(algs []engine.CryptoAlg) string {
	yes := map[bool]string{true: "yes", false: "no"}
	var b strings.Builder
	for _, a := range algs {
		fmt.Fprintf(&b, "name         : %s\ndriver       : %s\n", a.Name, a.Driver)
		if a.Module != "" {
			fmt.Fprintf(&b, "module       : %s\n", a.Module)
		}
		fmt.Fprintf(&b, "priority     : %d\n", a.Priority)
		if a.SelfTest != "" {
			fmt.Fprintf(&b, "selftest     : %s\n", a.SelfTest)
		}
		fmt.Fprintf(&b, "internal     : %s\n", yes[a.Internal])
		if a.Type != "" {
			fmt.Fprintf(&b, "type         : %s\n", a.Type)
		}
		fmt.Fprintf(&b, "async        : %s\n\n", yes[a.Async])
	}
	return b.String()
}

func FuzzParseProcCrypto(f *testing.F) {
	f.Add(procCryptoSample)
	f.Add("name : a\ndriver : b\npriority : -1\n")
	f.Add("name : a:b\ndriver : (\npriority : 9999999999999999999\n")
	for _, name := range []string{"proc-crypto-host-6.18.txt", "proc-crypto-vm-6.1-amd64.txt"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(string(b))
		}
	}
	f.Fuzz(func(t *testing.T, text string) {
		algs, err := engine.ParseProcCrypto(strings.NewReader(text))
		if err != nil {
			if !errors.Is(err, engine.ErrProcFormat) && !strings.Contains(err.Error(), "reading /proc/crypto") {
				t.Fatalf("error %v neither ErrProcFormat nor a read error", err)
			}
			return
		}
		for _, a := range algs {
			if a.Name == "" || a.Driver == "" {
				t.Fatalf("record without name or driver: %+v", a)
			}
			engine.ClassifyDriver(a.Driver, a.Async)
		}
		again, err := engine.ParseProcCrypto(strings.NewReader(formatProcCrypto(algs)))
		if err != nil || !slices.Equal(again, algs) {
			t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, again, algs)
		}
		for _, name := range []string{"cbc(aes)", "ctr(aes)"} {
			ds := engine.SkcipherDrivers(algs, name)
			for i := 1; i < len(ds); i++ {
				if ds[i].Priority > ds[i-1].Priority {
					t.Fatalf("SkcipherDrivers(%s) not sorted: %+v", name, ds)
				}
			}
		}
	})
}

func TestParseInterrupts(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want map[string]uint64
	}{
		{"host-6.18", string(readFixture(t, "proc-interrupts-host-6.18.txt")), map[string]uint64{
			"36: virtio1-req.0": 49930, "39: virtio2-output.0": 3871,
			"NMI: Non-maskable interrupts": 0, "ERR:": 0, "26: ttyS0": 9, "24: ACPI:Ged": 1,
		}},
		{"vm-6.1-amd64", string(readFixture(t, "proc-interrupts-vm-6.1-amd64.txt")), map[string]uint64{
			"25: virtio0-virtqueues": 403, "24: virtio0-config": 0, "0: timer": 272, "LOC: Local timer interrupts": 3893, "MIS:": 0,
		}},
		// Made up in the shape of arm (GIC) and mips (malta) kernels.
		{"arm", `           CPU0       CPU1
 11:      12345      12346     GICv2  30 Level     arch_timer
 45:        100          7     GICv2  97 Level     sun8i-ce-ns
IPI0:        10         20       Rescheduling interrupts
Err:          0
`, map[string]uint64{"11: arch_timer": 24691, "45: sun8i-ce-ns": 107, "IPI0: Rescheduling interrupts": 30, "Err:": 0}},
		{"mips", `           CPU0
  0:         48    XT-PIC  timer
 18:          3  MIPS GIC  18  virtio0-virtqueues
ERR:          2
`, map[string]uint64{"0: timer": 48, "18: virtio0-virtqueues": 3, "ERR:": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := engine.ParseInterrupts(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if len(in) == 0 {
				t.Fatal("no interrupts")
			}
			for k, v := range tc.want {
				if got, ok := in[k]; !ok || got != v {
					t.Errorf("%q = %d, %v; want %d (have %v)", k, got, ok, v, in)
				}
			}
		})
	}
	in, _ := engine.ParseInterrupts(strings.NewReader("  CPU0 CPU1\n 1: 5 6 X  virtio0-config\n 2: 1 1 X  virtio0-virtqueues\n 3: 9 9 X  virtio10-virtqueues\n"))
	if got := in.Sum("virtio0-"); got != 13 {
		t.Errorf("Sum(virtio0-) = %d, want 13", got)
	}
	for _, bad := range []string{"", "garbage\n", "  CPU0\n 1 2 3\n", "  CPU0\n 1: x y\n"} {
		if _, err := engine.ParseInterrupts(strings.NewReader(bad)); !errors.Is(err, engine.ErrProcFormat) {
			t.Errorf("ParseInterrupts(%q) = %v, want ErrProcFormat", bad, err)
		}
	}
}

// Each architecture names a virtio device's interrupt lines its own way;
// Device must count them all and nothing of virtio1 or virtio10.
func TestInterruptsDevice(t *testing.T) {
	for _, tc := range []struct {
		arch, text string
		want       uint64
	}{
		{"amd64", "           CPU0       CPU1\n 24:          0          0  PCI-MSIX-0000:00:03.0   0-edge      virtio0-config\n 25:       1466         34  PCI-MSIX-0000:00:03.0   1-edge      virtio0-virtqueues\n 26:          9          0  PCI-MSIX-0000:00:04.0   1-edge      virtio1-virtqueues\n", 1500},
		{"arm", "           CPU0       CPU1\n 32:        403          0     GIC-0  79 Edge      virtio0\n 33:          7          0     GIC-0  80 Edge      virtio10\n", 403},
		{"mipsle", "           CPU0\n 10:       6682    XT-PIC  10  virtio0\n 11:          5    XT-PIC  11  virtio1\n", 6682},
	} {
		in, err := engine.ParseInterrupts(strings.NewReader(tc.text))
		if err != nil {
			t.Fatalf("%s: %v", tc.arch, err)
		}
		if got := in.Device("virtio0"); got != tc.want {
			t.Errorf("%s: Device(virtio0) = %d, want %d (%v)", tc.arch, got, tc.want, in)
		}
	}
}
