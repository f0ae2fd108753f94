package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// A -pprof profile is also summed by component: every function's flat time
// goes to the first component whose pattern matches its name, so the
// shares add up to the profile's total. The components are offload's: what
// a frame costs (cipher, MAC, copies, system calls), what carries it
// (record layer, yamux, Go's scheduler) and what only the benchmark pays
// (load generator and sink). System calls cannot be split by flat time:
// TCP reads and writes and AF_ALG requests all end in the same syscall
// function; frame-cost gives the split per frame.
var components = []struct {
	name string
	re   *regexp.Regexp
}{
	{"AES in Go (software engine, CTR's XOR)", regexp.MustCompile(`crypto/internal/fips140/aes|crypto/aes|crypto/cipher|subtle\.(XORBytes|xor)|engine\.\(\*soft`)},
	// The record layer's Poly1305 is chacha20poly1305 sealing nothing
	// with the frame as additional data: one ChaCha20 block per frame for
	// the one-time key. math/bits is Poly1305's multiply-add, inlined;
	// poly32 is the record layer's own 26-bit-limb Poly1305 (32-bit CPUs).
	{"Poly1305 (with its ChaCha20 one-time key)", regexp.MustCompile(`poly1305|record\.\(\*poly32|/chacha20\.|^math/bits\.`)},
	{"HMAC-SHA-256 / GMAC", regexp.MustCompile(`sha256|hmac|gcm|ghash`)},
	{"key exchange (handshake)", regexp.MustCompile(`edwards25519|ecdh|curve25519|nistec|hkdf|flynn/noise|tunnel/handshake`)},
	{"system calls (TCP and AF_ALG)", regexp.MustCompile(`(?i)syscall`)},
	{"AF_ALG / cryptodev engine (Go side)", regexp.MustCompile(`offload/engine\.`)},
	{"memmove/memclr (copies)", regexp.MustCompile(`^runtime\.mem(move|clr)`)},
	{"record layer and tunnel", regexp.MustCompile(`offload/tunnel`)},
	{"yamux", regexp.MustCompile(`hashicorp/yamux`)},
	{"load generator and sink (bench only)", regexp.MustCompile(`offload/measure/bench|hash/crc32|chacha8rand|math/rand|^main\.`)},
	// Two runtime costs that stand out on 32-bit MIPS: the signal-driven
	// preemption (GODEBUG=asyncpreemptoff=1 removes it) and the clock,
	// which Go reads there with a clock_gettime system call (no vDSO), at
	// every scheduling round while a timer is pending.
	{"async preemption (runtime.asyncPreempt)", regexp.MustCompile(`^runtime\.asyncPreempt$`)},
	{"clock reads (runtime.nanotime1, walltime)", regexp.MustCompile(`^runtime\.(nanotime1|walltime)$`)},
	{"Go runtime (scheduler, GC, timers, preemption)", regexp.MustCompile(`^runtime\.|^internal/runtime|^sync\.|^internal/poll|^net\.|^time\.`)},
}

// pprofComponents reads `go tool pprof -top -nodecount=N` output (every
// node) and writes the flat time per component.
func pprofComponents(top string, w io.Writer) error {
	sums := make([]time.Duration, len(components)+1)
	var total time.Duration
	sc := bufio.NewScanner(strings.NewReader(top))
	rows := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") {
			continue
		}
		flat, err := parsePprofDuration(f[0])
		if err != nil {
			continue // a header line
		}
		name := strings.Join(f[5:], " ")
		rows++
		total += flat
		i := len(components)
		for k, c := range components {
			if c.re.MatchString(name) {
				i = k
				break
			}
		}
		sums[i] += flat
	}
	if rows == 0 || total <= 0 {
		return fmt.Errorf("pprof -top: no samples to break down")
	}
	fmt.Fprintf(w, "vm: flat CPU time by component (%v sampled):\n", total)
	for k, d := range sums {
		name := "other"
		if k < len(components) {
			name = components[k].name
		}
		if d > 0 {
			fmt.Fprintf(w, "  %-48s %8v %5.1f%%\n", name, d, 100*d.Seconds()/total.Seconds())
		}
	}
	return nil
}

// parsePprofDuration reads pprof's "0.34s", "340ms", "10us" or "0".
func parsePprofDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	return time.ParseDuration(s)
}
