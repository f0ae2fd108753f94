package engine_test

import (
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
)

func TestParseKernelRelease(t *testing.T) {
	for _, tc := range []struct {
		rel          string
		major, minor int
		ok           bool
	}{
		{"7.2.13+deb14-amd64", 7, 2, true},
		{"6.1.0-57-armmp", 6, 1, true},
		{"5.15.167", 5, 15, true},
		{"10.0-rc1", 10, 0, true},
		{"", 0, 0, false},
		{"linux", 0, 0, false},
		{"7", 0, 0, false},
		{"v7.2", 0, 0, false},
	} {
		major, minor, ok := engine.ParseKernelRelease(tc.rel)
		if major != tc.major || minor != tc.minor || ok != tc.ok {
			t.Errorf("ParseKernelRelease(%q) = %d, %d, %v; want %d, %d, %v", tc.rel, major, minor, ok, tc.major, tc.minor, tc.ok)
		}
	}
}

func TestAFALGPolicyFromKernel(t *testing.T) {
	for _, tc := range []struct {
		rel, restrict string
		softwareOnly  bool
		restrictVal   int
	}{
		{"6.1.0-57-amd64", "", false, -1},
		{"7.1.9", "", false, -1},
		{"7.2.13+deb14-amd64", "", true, -1},
		{"8.0.1", "", true, -1},
		{"7.3.0", "1\n", true, 1},
		{"7.3.0", "0\n", true, 0},
		// The sysctl only exists where AF_ALG is software-only, whatever
		// the release string says (a vendor kernel with a backport).
		{"6.6.50-vendor", "1\n", true, 1},
		{"7.3.0", "garbage", true, -1},
	} {
		p := engine.NewAFALGPolicy(tc.rel, tc.restrict)
		if p.SoftwareOnly != tc.softwareOnly || p.Restrict != tc.restrictVal || p.Release != tc.rel {
			t.Errorf("NewAFALGPolicy(%q, %q) = %+v; want software-only %v, restrict %d", tc.rel, tc.restrict, p, tc.softwareOnly, tc.restrictVal)
		}
	}
}

// fake72 is the part of /proc/crypto of Debian's 7.2.13 amd64 kernel in the
// VM (virtio-crypto attached) that decides where cbc(aes) goes, plus a
// synchronous device driver (a driver-only SoC engine) for the rule that
// AF_ALG refuses those too.
const fake72 = `name         : cbc(aes)
driver       : cbc-aes-aesni
module       : aesni_intel
priority     : 400
selftest     : passed
internal     : no
type         : skcipher
async        : no

name         : cbc(aes)
driver       : virtio_crypto_aes_cbc
module       : virtio_crypto
priority     : 150
selftest     : passed
internal     : no
type         : skcipher
async        : yes

name         : cbc(aes)
driver       : mtk-cbc-aes
module       : mtk_crypto
priority     : 900
selftest     : passed
internal     : no
type         : skcipher
async        : no
`

func parseFake(t *testing.T, text string) []engine.CryptoAlg {
	t.Helper()
	algs, err := engine.ParseProcCrypto(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return algs
}

func TestAFALGPolicyAdmits(t *testing.T) {
	algs := parseFake(t, fake72)
	old := engine.NewAFALGPolicy("6.1.0-57-amd64", "")
	new := engine.NewAFALGPolicy("7.2.13+deb14-amd64", "")
	for _, a := range algs {
		d := a.Describe()
		if !old.Admits(d) {
			t.Errorf("6.1 refuses %s", d.Name)
		}
		if got, want := new.Admits(d), !d.Hardware && !d.Async; got != want || (d.Name == "cbc-aes-aesni") != got {
			t.Errorf("7.2 admits %s = %v, want %v", d.Name, got, want)
		}
	}
	// What AF_ALG binds for the plain name: the device on 6.1 (it
	// outranks AES-NI here), the CPU code on 7.2, never a device.
	if d, ok := engine.BoundDriverUnder(algs, "cbc(aes)", old); !ok || d.Name != "mtk-cbc-aes" || !d.Hardware {
		t.Errorf("6.1 binds %+v, %v; want mtk-cbc-aes, hardware", d, ok)
	}
	if d, ok := engine.BoundDriverUnder(algs, "cbc(aes)", new); !ok || d.Name != "cbc-aes-aesni" || d.Hardware {
		t.Errorf("7.2 binds %+v, %v; want cbc-aes-aesni, CPU", d, ok)
	}
	devOnly := parseFake(t, strings.SplitN(fake72, "\n\n", 2)[1])
	if d, ok := engine.BoundDriverUnder(devOnly, "cbc(aes)", new); ok {
		t.Errorf("7.2 with devices only binds %+v, want none", d)
	}
}

func TestAFALGPolicyRefusal(t *testing.T) {
	algs := parseFake(t, fake72)
	virtio := algs[1].Describe()
	aesni := algs[0].Describe()
	for _, tc := range []struct {
		name string
		p    engine.AFALGPolicy
		d    engine.Driver
		want []string // parts of the refusal, none when "" is expected
	}{
		{"7.2 device", engine.NewAFALGPolicy("7.2.13+deb14-amd64", ""), virtio,
			[]string{"virtio_crypto_aes_cbc", "async device driver", "Linux 7.2.13+deb14-amd64 limits AF_ALG to synchronous software", "7524070f26d8", "cryptodev"}},
		{"7.3 device", engine.NewAFALGPolicy("7.3.1", "1"), virtio,
			[]string{"crypto.af_alg_restrict=1", "cryptodev"}},
		{"7.3 allowlist", engine.NewAFALGPolicy("7.3.1", "1"), aesni,
			[]string{"cbc-aes-aesni", "CPU implementation", "allowlist of crypto.af_alg_restrict (1)", "/proc/sys/crypto/af_alg_restrict=0"}},
		// An old release that refuses a listed device anyway: a backport,
		// recognised by behaviour.
		{"6.1 device", engine.NewAFALGPolicy("6.1.0-57-amd64", ""), virtio,
			[]string{"will not bind it", "7524070f26d8", "cryptodev"}},
		{"6.1 software", engine.NewAFALGPolicy("6.1.0-57-amd64", ""), aesni, nil},
		{"7.2 software", engine.NewAFALGPolicy("7.2.13", ""), aesni, nil},
	} {
		got := tc.p.Refusal(tc.d)
		if tc.want == nil {
			if got != "" {
				t.Errorf("%s: Refusal = %q, want none", tc.name, got)
			}
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: Refusal = %q, want it to say %q", tc.name, got, w)
			}
		}
		if strings.Contains(got, "cryptodev") != (tc.d.Hardware || tc.d.Async) {
			t.Errorf("%s: Refusal = %q points at cryptodev for a CPU driver or misses it for a device", tc.name, got)
		}
	}
}

func TestAFALGNote(t *testing.T) {
	algs := parseFake(t, fake72)
	if n := engine.NewAFALGPolicy("6.1.0-57-amd64", "").AFALGNote(algs); n != "" {
		t.Errorf("6.1 note = %q, want none", n)
	}
	n := engine.NewAFALGPolicy("7.2.13+deb14-amd64", "").AFALGNote(algs)
	for _, w := range []string{"afalg on this kernel reaches only CPU implementations", "7.2.13+deb14-amd64", "virtio_crypto_aes_cbc, mtk-cbc-aes", "reachable through cryptodev"} {
		if !strings.Contains(n, w) {
			t.Errorf("7.2 note = %q, want it to say %q", n, w)
		}
	}
	if strings.Contains(n, "aesni") {
		t.Errorf("7.2 note = %q names a CPU driver as a device", n)
	}
	n = engine.NewAFALGPolicy("7.3.0", "1").AFALGNote(nil)
	if !strings.Contains(n, "crypto.af_alg_restrict=1") || !strings.Contains(n, "a device is reachable through cryptodev") {
		t.Errorf("7.3 note without /proc/crypto = %q", n)
	}
}

// TestAFALGPolicyOnDebian72 reads /proc/crypto of Debian sid's 7.2.13
// kernel in the VM (aesni_intel and virtio_crypto loaded, AF_ALG sockets
// used once): AF_ALG's plain cbc(aes) is AES-NI, the device is refused
// with the reason, and the note names the device for cryptodev.
func TestAFALGPolicyOnDebian72(t *testing.T) {
	algs := parseFake(t, string(readFixture(t, "proc-crypto-vm-7.2-amd64.txt")))
	p := engine.NewAFALGPolicy("7.2.13+deb14-amd64", "")
	if d, ok := engine.BoundDriverUnder(algs, "cbc(aes)", p); !ok || d.Name != "cbc-aes-aesni" || d.Hardware {
		t.Errorf("cbc(aes) binds %+v, %v; want cbc-aes-aesni, CPU", d, ok)
	}
	var virtio engine.Driver
	for _, d := range engine.SkcipherDrivers(algs, "cbc(aes)") {
		if d.Name == "virtio_crypto_aes_cbc" {
			virtio = d
		}
	}
	if !virtio.Hardware || !virtio.Async || p.Admits(virtio) {
		t.Fatalf("virtio_crypto_aes_cbc = %+v, admitted %v; want an async device AF_ALG refuses", virtio, p.Admits(virtio))
	}
	if r := p.Refusal(virtio); !strings.Contains(r, "7524070f26d8") || !strings.Contains(r, "cryptodev") {
		t.Errorf("Refusal = %q", r)
	}
	if devs := engine.Devices(algs); len(devs) == 0 || devs[0] != "virtio_crypto_aes_cbc" {
		t.Errorf("Devices = %q, want virtio_crypto_aes_cbc first (no CPU driver)", devs)
	}
}
