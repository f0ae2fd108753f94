package engine

// Portable parsers for /proc/crypto and /proc/interrupts, and the classifier
// that tells a crypto device from a CPU implementation by driver name. They
// are plain text functions so that every platform can test them against
// fixtures; only the Read* helpers touch the file system.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ProcCryptoPath and ProcInterruptsPath are where Linux publishes its crypto
// algorithms and interrupt counters.
const (
	ProcCryptoPath     = "/proc/crypto"
	ProcInterruptsPath = "/proc/interrupts"
)

// ErrProcFormat means /proc/crypto or /proc/interrupts text could not be
// parsed. It points at a kernel whose format this code does not know; report
// it with the text.
var ErrProcFormat = errors.New("unexpected /proc format")

// CryptoAlg is one record of /proc/crypto.
type CryptoAlg struct {
	Name     string // cra_name, e.g. "cbc(aes)"
	Driver   string // cra_driver_name, e.g. "cbc-aes-aesni"
	Module   string // "kernel" when built in
	Priority int
	Type     string // "skcipher", "lskcipher", "cipher", "shash", ...
	Async    bool
	Internal bool   // only usable inside the kernel (e.g. "__cbc-aes-aesni")
	SelfTest string // "passed", "unknown", ...
}

// IsSkcipher reports whether a can serve an AF_ALG skcipher socket: the
// skcipher and lskcipher types of current kernels and the blkcipher,
// ablkcipher and givcipher types of kernels before 4.20 (old router
// firmware), excluding internal drivers, which AF_ALG cannot bind.
func (a CryptoAlg) IsSkcipher() bool {
	if a.Internal {
		return false
	}
	switch a.Type {
	case "skcipher", "lskcipher", "blkcipher", "ablkcipher", "givcipher":
		return true
	}
	return false
}

// Describe describes a as an engine Driver, with the hardware classification.
func (a CryptoAlg) Describe() Driver {
	hw, why := ClassifyDriver(a.Driver, a.Async)
	return Driver{
		Name: a.Driver, Algorithm: a.Name, Module: a.Module, Priority: a.Priority,
		Async: a.Async, Hardware: hw, HardwareWhy: why,
	}
}

// ParseProcCrypto parses the text of /proc/crypto: records of "key : value"
// lines separated by blank lines. Unknown keys are ignored; a line without a
// colon, a record without name or driver, or a non-numeric priority is an
// error wrapping ErrProcFormat that names the line.
func ParseProcCrypto(r io.Reader) ([]CryptoAlg, error) {
	var (
		out   []CryptoAlg
		cur   CryptoAlg
		start int // line of cur's first key, 0 when cur is empty
		line  int
	)
	flush := func() error {
		if start == 0 {
			return nil
		}
		if cur.Name == "" || cur.Driver == "" {
			return fmt.Errorf("%w: /proc/crypto record at line %d has no name or driver", ErrProcFormat, start)
		}
		out = append(out, cur)
		cur, start = CryptoAlg{}, 0
		return nil
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		key, val, ok := strings.Cut(text, ":")
		if !ok {
			return nil, fmt.Errorf("%w: /proc/crypto line %d: no colon in %q", ErrProcFormat, line, text)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if start == 0 {
			start = line
		}
		switch key {
		case "name":
			cur.Name = val
		case "driver":
			cur.Driver = val
		case "module":
			cur.Module = val
		case "priority":
			p, err := strconv.Atoi(val)
			if err != nil {
				return nil, fmt.Errorf("%w: /proc/crypto line %d: priority %q is not a number", ErrProcFormat, line, val)
			}
			cur.Priority = p
		case "type":
			cur.Type = val
		case "async":
			cur.Async = val == "yes"
		case "internal":
			cur.Internal = val == "yes"
		case "selftest":
			cur.SelfTest = val
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading /proc/crypto: %w", err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadProcCrypto reads and parses /proc/crypto.
func ReadProcCrypto() ([]CryptoAlg, error) {
	b, err := os.ReadFile(ProcCryptoPath)
	if err != nil {
		return nil, err
	}
	return ParseProcCrypto(bytes.NewReader(b))
}

// SkcipherDrivers returns the drivers in algs that an AF_ALG skcipher socket
// can bind for the algorithm name (e.g. "cbc(aes)"), highest priority first
// (ties by driver name, so the order is stable). A driver registered twice
// (a larval and a final record) is listed once.
func SkcipherDrivers(algs []CryptoAlg, name string) []Driver {
	var out []Driver
	for _, a := range algs {
		if a.Name != name || !a.IsSkcipher() {
			continue
		}
		if slices.ContainsFunc(out, func(d Driver) bool { return d.Name == a.Driver }) {
			continue
		}
		out = append(out, a.Describe())
	}
	slices.SortStableFunc(out, func(a, b Driver) int {
		if a.Priority != b.Priority {
			return b.Priority - a.Priority
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// BoundDriver returns the driver the kernel binds for a plain algorithm
// name: the highest-priority skcipher driver whose self-test passed (the
// crypto API skips untested ones; kernels before 4.x print no selftest line).
func BoundDriver(algs []CryptoAlg, name string) (Driver, bool) {
	return BoundDriverUnder(algs, name, AFALGPolicy{Restrict: -1})
}

// BoundDriverUnder is BoundDriver for an AF_ALG socket under policy p: on a
// kernel that keeps AF_ALG to CPU implementations the highest-priority
// driver it admits, so a device that outranks the CPU code in /proc/crypto
// is not taken for what AF_ALG bound.
func BoundDriverUnder(algs []CryptoAlg, name string, p AFALGPolicy) (Driver, bool) {
	best, found := CryptoAlg{}, false
	for _, a := range algs {
		if a.Name != name || !a.IsSkcipher() || (a.SelfTest != "" && a.SelfTest != "passed") || !p.Admits(a.Describe()) {
			continue
		}
		if !found || a.Priority > best.Priority {
			best, found = a, true
		}
	}
	return best.Describe(), found
}

// driverRule is one line of the classifier: a driver name matches when one
// of its tokens (split at - _ . ( ) , and spaces) equals token, or, when
// substr is set, when the name contains it anywhere.
type driverRule struct {
	match  string
	substr bool
	what   string
}

// deviceRules name crypto devices: SoC engines, PCI cards, virtual devices.
// They are checked before cpuRules, because some device drivers carry a
// CPU-looking suffix (sun8i-ce is the Allwinner Crypto Engine, not ARMv8 CE).
var deviceRules = []driverRule{
	{"virtio_crypto", true, "virtio-crypto device"},
	{"mtk", true, "MediaTek crypto engine"},
	{"eip93", true, "Inside Secure EIP-93 engine (MediaTek MT7621 and others)"},
	{"eip97", true, "Inside Secure EIP-97 engine"},
	{"eip197", true, "Inside Secure EIP-197 engine"},
	{"safexcel", true, "Inside Secure SafeXcel engine"},
	{"eip", false, "Inside Secure EIP engine"},
	{"ltq", true, "Lantiq crypto engine"},
	{"ifxdeu", true, "Lantiq Data Encryption Unit"},
	{"deu", false, "Lantiq Data Encryption Unit"},
	{"sun4i", true, "Allwinner Security System"},
	{"sun8i", true, "Allwinner Crypto Engine / Security System"},
	{"gxl", false, "Amlogic GXL crypto engine"},
	{"amlogic", true, "Amlogic crypto engine"},
	{"meson", true, "Amlogic crypto engine"},
	{"atmel", true, "Microchip/Atmel AES engine"},
	{"caam", true, "NXP CAAM"},
	{"talitos", true, "NXP/Freescale SEC (talitos)"},
	{"omap", true, "TI OMAP AES engine"},
	{"sa2ul", true, "TI SA2UL"},
	{"mxs-dcp", true, "NXP DCP"},
	{"dcp", false, "NXP DCP"},
	{"sahara", true, "NXP SAHARA"},
	{"ccp", false, "AMD Cryptographic Coprocessor"},
	{"qat", false, "Intel QuickAssist"},
	{"hisi", true, "HiSilicon SEC"},
	{"rk", false, "Rockchip crypto engine"},
	{"rockchip", true, "Rockchip crypto engine"},
	{"stm32", true, "STM32 CRYP"},
	{"ixp4xx", true, "Intel IXP4xx NPE crypto"},
	{"mv", false, "Marvell CESA"},
	{"marvell", true, "Marvell CESA"},
	{"cesa", true, "Marvell CESA"},
	{"nx", false, "IBM Power NX coprocessor"},
	{"n2", false, "Niagara2 SPU"},
	{"crypto4xx", true, "AMCC PPC4xx crypto engine"},
	{"ppc4xx", true, "AMCC PPC4xx crypto engine"},
	{"ccree", true, "Arm TrustZone CryptoCell"},
	{"qce", false, "Qualcomm crypto engine"},
	{"s5p", true, "Samsung S5P/Exynos SSS"},
	{"exynos", true, "Samsung Exynos SSS"},
	{"artpec", true, "Axis ARTPEC crypto"},
	{"zynqmp", true, "Xilinx ZynqMP AES"},
	{"keembay", true, "Intel Keem Bay OCS"},
	{"aspeed", true, "ASPEED HACE"},
	{"sl3516", true, "Storlink SL3516 crypto"},
	{"hifn", true, "Hifn 795x card"},
	{"nitrox", true, "Cavium NITROX"},
	{"chcr", true, "Chelsio crypto"},
	{"img", false, "Imagination crypto engine"},
	{"geode", true, "AMD Geode LX AES engine"},
}

// cpuRules name implementations that run on the CPU, with or without special
// instructions. IBM Z CPACF, VIA PadLock and Octeon's COP2 are reached through
// instructions on every core, like AES-NI, so they count as CPU: they take
// the same CPU time as Go's own code would, which is what routing cares about.
var cpuRules = []driverRule{
	{"generic", false, "generic C code"},
	{"fixed-time", true, "generic C code (fixed-time)"},
	{"aesni", true, "x86 AES-NI instructions"},
	{"aes-asm", true, "x86 assembly"},
	{"avx", true, "x86 AVX instructions"},
	{"avx2", true, "x86 AVX2 instructions"},
	{"vaes", true, "x86 VAES instructions"},
	{"x86_64", true, "x86 assembly"},
	{"ce", false, "ARMv8 Cryptography Extensions"},
	{"neon", false, "ARM NEON"},
	{"neonbs", true, "ARM NEON (bit-sliced)"},
	{"bs", false, "ARM NEON (bit-sliced)"},
	{"arm", false, "ARM assembly"},
	{"arm64", false, "ARM64 assembly"},
	{"ppc", false, "PowerPC assembly"},
	{"spe", false, "PowerPC SPE"},
	{"vmx", false, "PowerPC VMX"},
	{"p8", false, "POWER8 vector crypto"},
	{"s390", false, "IBM Z CPACF instructions (on-core)"},
	{"padlock", true, "VIA PadLock instructions (on-core)"},
	{"octeon", true, "Cavium Octeon COP2 instructions (on-core)"},
	{"sparc64", true, "SPARC crypto instructions"},
	{"riscv64", true, "RISC-V vector crypto"},
	{"zvkned", true, "RISC-V vector crypto"},
	{"simd", false, "SIMD wrapper of a CPU implementation"},
	{"lib", false, "kernel library code"},
}

// ClassifyDriver decides whether the kernel driver name (cra_driver_name)
// is a hardware crypto device or CPU code, and says which rule decided.
// /proc/crypto has no hardware flag, so the rules are, in order: a known
// device driver name; a known CPU implementation name; a template instance
// such as cbc(aes-generic) or cryptd(__cbc-aes-aesni), which is hardware if
// what it wraps is; otherwise an async driver is assumed to be a device
// queue and a synchronous one CPU code.
func ClassifyDriver(name string, async bool) (hardware bool, why string) {
	if r, ok := matchRule(name, deviceRules); ok {
		return true, fmt.Sprintf("%q matches %q: %s", name, r.match, r.what)
	}
	if r, ok := matchRule(name, cpuRules); ok {
		return false, fmt.Sprintf("%q matches %q: %s", name, r.match, r.what)
	}
	if tmpl, args, ok := splitTemplate(name); ok {
		// A template instance is async when what it wraps is, except
		// cryptd, which makes a synchronous (CPU) cipher async by running
		// it on a kernel thread.
		inner := async && tmpl != "cryptd"
		var first string
		for i, a := range args {
			hw, why := ClassifyDriver(a, inner)
			if hw {
				return true, fmt.Sprintf("template %s wraps %s", tmpl, why)
			}
			if i == 0 {
				first = why
			}
		}
		return false, fmt.Sprintf("template %s wraps %s", tmpl, first)
	}
	if async {
		return true, fmt.Sprintf("%q is an unknown async driver, assumed device", name)
	}
	return false, fmt.Sprintf("%q is an unknown synchronous driver, assumed CPU", name)
}

func matchRule(name string, rules []driverRule) (driverRule, bool) {
	lower := strings.ToLower(strings.TrimLeft(name, "_"))
	tokens := strings.FieldsFunc(lower, func(r rune) bool {
		return strings.ContainsRune("-_.(), ", r)
	})
	for _, r := range rules {
		if r.substr && strings.Contains(lower, r.match) || !r.substr && slices.Contains(tokens, r.match) {
			return r, true
		}
	}
	return driverRule{}, false
}

// splitTemplate splits "tmpl(a,b(c))" into "tmpl" and ["a", "b(c)"].
func splitTemplate(name string) (tmpl string, args []string, ok bool) {
	open := strings.IndexByte(name, '(')
	if open <= 0 || !strings.HasSuffix(name, ")") {
		return "", nil, false
	}
	inner := name[open+1 : len(name)-1]
	depth, from := 0, 0
	for i := 0; i < len(inner); i++ {
		switch inner[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return "", nil, false
			}
		case ',':
			if depth == 0 {
				args = append(args, strings.TrimSpace(inner[from:i]))
				from = i + 1
			}
		}
	}
	if depth != 0 {
		return "", nil, false
	}
	args = append(args, strings.TrimSpace(inner[from:]))
	if slices.Contains(args, "") {
		return "", nil, false
	}
	return strings.TrimLeft(name[:open], "_"), args, true
}

// Interrupts holds the counters of /proc/interrupts summed over all CPUs,
// keyed "IRQ: name", e.g. "25: virtio0-virtqueues", "NMI: Non-maskable
// interrupts", or "ERR:" for a line without a name. The name is the action
// (the last column); chip and trigger columns are dropped.
type Interrupts map[string]uint64

// Sum adds the counters whose name (the part after "IRQ: ") starts with
// prefix, e.g. "virtio0-".
func (in Interrupts) Sum(prefix string) uint64 {
	var n uint64
	for k, v := range in {
		if _, name, _ := strings.Cut(k, ": "); strings.HasPrefix(name, prefix) {
			n += v
		}
	}
	return n
}

// Device adds the counters of one device's lines: those whose name is dev
// ("virtio0", as arm and mips name the line) or starts with dev+"-"
// ("virtio0-virtqueues", "virtio0-config", as x86 with MSI-X names them).
func (in Interrupts) Device(dev string) uint64 {
	var n uint64
	for k, v := range in {
		if _, name, _ := strings.Cut(k, ": "); name == dev || strings.HasPrefix(name, dev+"-") {
			n += v
		}
	}
	return n
}

// ParseInterrupts parses the text of /proc/interrupts: a header of CPU
// columns, then one line per interrupt with one counter per CPU (some, like
// ERR, have one counter only), then chip, hardware IRQ and action name
// columns.
func ParseInterrupts(r io.Reader) (Interrupts, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("reading /proc/interrupts: %w", err)
		}
		return nil, fmt.Errorf("%w: /proc/interrupts is empty", ErrProcFormat)
	}
	cpus := len(strings.Fields(sc.Text()))
	if cpus == 0 || !strings.HasPrefix(strings.Fields(sc.Text())[0], "CPU") {
		return nil, fmt.Errorf("%w: /proc/interrupts header %q has no CPU columns", ErrProcFormat, sc.Text())
	}
	out := Interrupts{}
	line := 1
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		irq, rest, ok := strings.Cut(text, ":")
		if !ok || irq == "" || strings.ContainsAny(irq, " \t") {
			return nil, fmt.Errorf("%w: /proc/interrupts line %d: no IRQ label in %q", ErrProcFormat, line, text)
		}
		var sum uint64
		counted := 0
		for counted < cpus {
			rest = strings.TrimLeft(rest, " \t")
			end := strings.IndexAny(rest, " \t")
			if end < 0 {
				end = len(rest)
			}
			n, err := strconv.ParseUint(rest[:end], 10, 64)
			if err != nil {
				break
			}
			sum += n
			counted++
			rest = rest[end:]
		}
		if counted == 0 {
			return nil, fmt.Errorf("%w: /proc/interrupts line %d: no counters in %q", ErrProcFormat, line, text)
		}
		name := strings.TrimSpace(rest)
		if i := strings.LastIndex(name, "  "); i >= 0 {
			name = strings.TrimSpace(name[i:])
		}
		key := irq + ":"
		if name != "" {
			key += " " + name
		}
		out[key] += sum
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading /proc/interrupts: %w", err)
	}
	return out, nil
}

// ReadInterrupts reads and parses /proc/interrupts.
func ReadInterrupts() (Interrupts, error) {
	b, err := os.ReadFile(ProcInterruptsPath)
	if err != nil {
		return nil, err
	}
	return ParseInterrupts(bytes.NewReader(b))
}
