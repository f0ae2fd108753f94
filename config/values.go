package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/selector"
)

// ParseSize reads a byte count: a plain integer ("16384") or an integer with
// a binary unit, "16KiB", "1MiB", "1GiB" (also "K", "M", "G"; the unit is
// case-insensitive and may follow a space). Decimal units (kB, MB) are
// refused as ambiguous.
func ParseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '_') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("%q is not a size (want bytes, or a number with KiB or MiB, e.g. 16KiB)", s)
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(num, "_", ""), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	var mult int64
	switch unit {
	case "", "b":
		mult = 1
	case "k", "kib":
		mult = 1 << 10
	case "m", "mib":
		mult = 1 << 20
	case "g", "gib":
		mult = 1 << 30
	case "kb", "mb", "gb":
		return 0, fmt.Errorf("%q: unit %s is ambiguous; write %siB (binary)", s, t[i:], strings.ToUpper(unit[:1]))
	default:
		return 0, fmt.Errorf("%q: unknown unit %q (want KiB, MiB or GiB)", s, strings.TrimSpace(t[i:]))
	}
	if n > math.MaxInt32/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int(n * mult), nil
}

// ParseDuration reads a Go duration ("15s", "1m30s", "500ms"); a bare 0
// is also accepted. Negative durations are refused.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "0" {
		return 0, nil
	}
	if t != "" && strings.Trim(t, "0123456789.") == "" {
		return 0, fmt.Errorf("%q has no unit (write e.g. %ss)", s, t)
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (e.g. 15s, 500ms, 1m)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return d, nil
}

// addrKind says what a host:port may omit.
type addrKind int

const (
	addrListen addrKind = iota // host may be empty (all interfaces)
	addrDial                   // host required
)

// checkHostPort validates "host:port" with a numeric port 1-65535. what
// names the value in messages ("target", "address").
func checkHostPort(s string, kind addrKind, what string) error {
	if !strings.Contains(s, ":") {
		return fmt.Errorf("%s %q has no port (want host:port)", what, s)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%s %q is not host:port: %w", what, s, err)
	}
	if err := checkPort(port); err != nil {
		return fmt.Errorf("%s %q: %w", what, s, err)
	}
	if host == "" {
		if kind == addrDial {
			return fmt.Errorf("%s %q has no host", what, s)
		}
		return nil
	}
	if err := checkHost(host); err != nil {
		return fmt.Errorf("%s %q: %w", what, s, err)
	}
	return nil
}

func checkPort(p string) error {
	n, err := strconv.Atoi(p)
	if err != nil || p[0] == '+' || p[0] == '-' {
		return fmt.Errorf("port %q is not a number", p)
	}
	if n < 1 || n > 65535 {
		return fmt.Errorf("port %d out of range 1-65535", n)
	}
	return nil
}

// checkHost accepts an IP address (with an optional IPv6 zone) or a DNS
// name.
func checkHost(h string) error {
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	if len(h) > 253 {
		return errors.New("host name longer than 253 characters")
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host %q is not an IP address or host name", h)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host %q is not an IP address or host name", h)
			}
		}
	}
	return nil
}

// MaxServiceName is the longest service name a config may use.
const MaxServiceName = 63

// CheckServiceName validates a service name: [a-z0-9][a-z0-9._-]*, at most
// MaxServiceName bytes.
func CheckServiceName(name string) error {
	if name == "" {
		return errors.New("service name is empty")
	}
	if len(name) > MaxServiceName {
		return fmt.Errorf("service name %q is longer than %d characters", name, MaxServiceName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("service name %q: want lower-case letters, digits, and . _ - after the first character", name)
		}
	}
	return nil
}

// CheckEngine validates the syntax of an engine spec with the check
// selector.Engines makes before it builds anything (selector.CheckSpec),
// so a config that validates names an engine the tunnel knows and one
// that does not is refused here, not at start. Whether the engine is
// available is only known on the machine that runs it.
func CheckEngine(spec string) error {
	return selector.CheckSpec(spec)
}

// checkEngineSuggest is CheckEngine with a "did you mean" for a misspelt
// engine name ("sofware", "afalgg:DRIVER").
func checkEngineSuggest(spec string) error {
	err := CheckEngine(spec)
	if err == nil {
		return nil
	}
	known := []string{selector.SpecAuto, selector.SpecHybrid}
	for _, f := range engine.Families() {
		known = append(known, f.Name)
	}
	name, arg, hasArg := strings.Cut(spec, ":")
	s := suggestion(name, known)
	if s == "" || s == name {
		return err
	}
	if hasArg {
		s += ":" + arg
	}
	if CheckEngine(s) != nil {
		return err
	}
	return &sentinelError{fmt.Sprintf("unknown engine %q; did you mean %q?", spec, s), err}
}
