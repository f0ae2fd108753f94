package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// What the running kernel lets an AF_ALG socket bind. Linux 7.2 (commit
// 7524070f26d8) limits AF_ALG to synchronous implementations that are not
// kernel-driver-only: every crypto device (async, or flagged driver-only)
// is refused, and bind(2) fails with ENOENT although /proc/crypto lists the
// driver. Linux 7.3 adds the sysctl crypto.af_alg_restrict (default 1), an
// allowlist whose refusals also fail bind with ENOENT. cryptodev-linux
// (/dev/crypto) is then the user-space road to a device. These are plain
// functions of the kernel release, the sysctl's text and /proc/crypto, so
// that every platform tests them against fixtures.

// AFALGRestrictSysctl is the Linux 7.3 sysctl that turns AF_ALG's allowlist
// on (1, the default) or off (0), and the file that holds it.
const (
	AFALGRestrictSysctl = "crypto.af_alg_restrict"
	AFALGRestrictPath   = "/proc/sys/crypto/af_alg_restrict"
)

// ErrAFALGRefused means /proc/crypto lists the driver but AF_ALG refuses to
// bind it: a kernel that keeps AF_ALG to CPU implementations (Linux 7.2 and
// later) or the crypto.af_alg_restrict allowlist. It wraps ErrUnavailable;
// the wrapping error says which. Reach a device through the cryptodev
// engine instead.
var ErrAFALGRefused = fmt.Errorf("%w: AF_ALG refuses the driver", ErrUnavailable)

// AFALGPolicy is what the running kernel lets AF_ALG bind.
type AFALGPolicy struct {
	// Release is the kernel release (uname -r), "" where unknown.
	Release string
	// SoftwareOnly: the release is Linux 7.2 or later, whose AF_ALG binds
	// only synchronous, non-driver-only software implementations.
	SoftwareOnly bool
	// Restrict is crypto.af_alg_restrict's value, -1 where the sysctl is
	// absent (before Linux 7.3) or unreadable.
	Restrict int
}

// NewAFALGPolicy describes a kernel from its release and the text of
// AFALGRestrictPath (restrict "" when the file is absent).
func NewAFALGPolicy(release, restrict string) AFALGPolicy {
	p := AFALGPolicy{Release: release, Restrict: -1}
	if major, minor, ok := ParseKernelRelease(release); ok {
		p.SoftwareOnly = major > 7 || major == 7 && minor >= 2
	}
	if v, err := strconv.Atoi(strings.TrimSpace(restrict)); err == nil && v >= 0 {
		p.Restrict = v
		// The sysctl exists only in kernels whose AF_ALG is software-only.
		p.SoftwareOnly = true
	}
	return p
}

// ParseKernelRelease reads major and minor from a release such as
// "7.2.13+deb14-amd64" or "6.1.0-57-armmp".
func ParseKernelRelease(release string) (major, minor int, ok bool) {
	fields := strings.FieldsFunc(release, func(r rune) bool { return r < '0' || r > '9' })
	if len(fields) < 2 || !strings.HasPrefix(release, fields[0]+".") {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(fields[0])
	minor, err2 := strconv.Atoi(fields[1])
	return major, minor, err1 == nil && err2 == nil
}

// Admits reports whether AF_ALG on this kernel can bind d: everything on a
// kernel before 7.2; otherwise only a synchronous driver that is CPU code.
// (/proc/crypto does not show the driver-only flag; a synchronous driver
// the classifier calls a device counts as driver-only, which is what
// device drivers set.)
func (p AFALGPolicy) Admits(d Driver) bool {
	return !p.SoftwareOnly || !d.Async && !d.Hardware
}

// Reason says what limits AF_ALG here, "" on a kernel that does not.
func (p AFALGPolicy) Reason() string {
	var parts []string
	if p.SoftwareOnly {
		kernel := "this kernel"
		if p.Release != "" {
			kernel = "Linux " + p.Release
		}
		parts = append(parts, kernel+" limits AF_ALG to synchronous software implementations, as Linux does since 7.2, commit 7524070f26d8")
	}
	if p.Restrict > 0 {
		parts = append(parts, fmt.Sprintf("%s=%d allows only its allowlist", AFALGRestrictSysctl, p.Restrict))
	}
	return strings.Join(parts, "; ")
}

// Refusal explains why bind(2) failed with ENOENT for d, a driver
// /proc/crypto lists: which rule of the kernel refused it, and where the
// device is reachable instead.
func (p AFALGPolicy) Refusal(d Driver) string {
	kind := "a CPU implementation"
	switch {
	case d.Hardware && d.Async:
		kind = "an async device driver"
	case d.Hardware:
		kind = "a device driver (kernel-driver-only)"
	case d.Async:
		kind = "an async driver"
	}
	device := d.Hardware || d.Async
	var why string
	switch {
	case device && p.SoftwareOnly:
		why = p.Reason()
	case p.Restrict > 0:
		why = fmt.Sprintf("the allowlist of %s (%d) does not hold it (%s lifts it)", AFALGRestrictSysctl, p.Restrict, AFALGRestrictPath+"=0")
	case device:
		why = "the kernel lists it but AF_ALG will not bind it, as kernels with commit 7524070f26d8 (Linux 7.2, or a backport) refuse devices"
	default:
		return ""
	}
	s := fmt.Sprintf("%s is %s: %s", d.Name, kind, why)
	if device {
		s += "; the device is reachable through cryptodev (/dev/crypto, engine cryptodev:hw)"
	}
	return s
}

// AFALGNote is what listings (offload engines, speed, calibrate, the
// selector's log) say about AF_ALG on this kernel: "" where it reaches
// devices as before, else that it reaches only CPU implementations and
// which devices /proc/crypto lists for cryptodev to use. algs is
// /proc/crypto (nil when unknown).
func (p AFALGPolicy) AFALGNote(algs []CryptoAlg) string {
	if !p.SoftwareOnly && p.Restrict <= 0 {
		return ""
	}
	s := "afalg on this kernel reaches only CPU implementations (" + p.Reason() + ")"
	if devs := Devices(algs); len(devs) > 0 {
		s += "; the device (" + strings.Join(devs, ", ") + ") is reachable through cryptodev"
	} else {
		s += "; a device is reachable through cryptodev"
	}
	return s
}

// Devices lists the drivers in algs that the classifier calls devices
// (skcipher and aead types, not internal), each once, in order.
func Devices(algs []CryptoAlg) []string {
	var out []string
	for _, a := range algs {
		if a.Internal || !a.IsSkcipher() && a.Type != "aead" {
			continue
		}
		if hw, _ := ClassifyDriver(a.Driver, a.Async); hw && !slices.Contains(out, a.Driver) {
			out = append(out, a.Driver)
		}
	}
	return out
}

// refusedError is the error of a bind that failed with ENOENT although
// /proc/crypto lists the driver, when the policy explains it; nil when it
// does not (the caller keeps its own explanation).
func refusedError(engine string, c Cipher, p AFALGPolicy, d Driver, err error) error {
	why := p.Refusal(d)
	if why == "" {
		return nil
	}
	return fmt.Errorf("%s %v: %w: %s: %w", engine, c, ErrAFALGRefused, why, err)
}
