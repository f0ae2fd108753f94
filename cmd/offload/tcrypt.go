package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/measure/speed"
)

// `offload speed -tcrypt` prints what the kernel's tcrypt module prints for
// `modprobe tcrypt sec=N mode=200` (crypto/tcrypt.c, test_skcipher_speed),
// without the dmesg timestamps, so seed 004's figures compare line by line:
//
//	tcrypt:
//	testing speed of async cbc(aes) (cbc(aes-arm64)) encryption
//	tcrypt: test 0 (128 bit key, 16 byte blocks): 1784200 operations in 1 seconds (28547200 bytes)
//
// one block per mode and direction (ecb, cbc, ctr; encryption then
// decryption), tests numbered over the key sizes 128, 192, 256 and the
// block sizes. The parentheses name the driver that served the run, as the
// Crypter reports it; "async" or "sync" is that driver's own flag (tcrypt
// prints which kernel API it used, and before Linux 5.6 printed "async"
// for mode 200 whatever the API: the seed's "async" is that bug). A new
// header is printed when another key size is served by another driver.
// Where an engine cannot serve a cipher tcrypt's "failed to load
// transform" line says why, and the run goes on, as tcrypt's does.

// tcryptSizes are tcrypt's skcipher speed block sizes in seed 004's kernel
// (5.5); tcryptSizes61 are those of Linux 6.1 (the CI VM's), which -sizes
// takes too.
var (
	tcryptSizes   = []int{16, 64, 256, 1024, 1472, 8192}
	tcryptSizes61 = []int{16, 64, 128, 256, 1024, 1420, 4096}
)

// tcryptModes are the modes of mode=200 that offload serves, in its order.
var tcryptModes = []engine.Mode{engine.ECB, engine.CBC, engine.CTR}

func sizeList(sizes []int) string {
	s := make([]string, len(sizes))
	for i, n := range sizes {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " ")
}

// parseTcryptModes reads mode names: "cbc" or tcrypt's "cbc(aes)"; none
// means all of tcryptModes.
func parseTcryptModes(names []string) ([]engine.Mode, error) {
	if len(names) == 0 {
		return tcryptModes, nil
	}
	var out []engine.Mode
	for _, n := range names {
		name := strings.TrimSuffix(strings.ToLower(n), "(aes)")
		found := false
		for _, m := range tcryptModes {
			if m.String() == name {
				out, found = append(out, m), true
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: -tcrypt mode %q (want ecb, cbc or ctr)", engine.ErrUnknownCipher, n)
		}
	}
	return out, nil
}

func runTcrypt(ctx context.Context, env *runEnv, o speedOpts, names []string) (int, error) {
	modes, err := parseTcryptModes(names)
	if err != nil {
		return 2, err
	}
	sizes, err := o.blockSizes(tcryptSizes)
	if err != nil {
		return 2, err
	}
	var named engine.Engine
	if o.engine != "all" {
		if named, err = engine.Open(o.engine, engine.Options{}); err != nil {
			return 2, err
		}
	}
	w := env.Stdout
	measured, failed := 0, 0
	for _, m := range modes {
		engines := []engine.Engine{named}
		if named == nil {
			engines = engine.All(engine.Cipher{Mode: m, KeyBits: 128}, engine.Options{})
		}
		for _, e := range engines {
			if why := engine.WhyNoCipherFigures(e.Name()); why != "" {
				fmt.Fprintf(env.Stderr, "engine %s: not measured: %s\n", e.Name(), why)
				continue
			}
			if len(engines) > 1 {
				fmt.Fprintf(env.Stderr, "engine %s:\n", e.Name())
			}
			for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
				n, err := tcryptBlock(ctx, w, e, m, d, sizes, time.Duration(o.seconds)*time.Second)
				measured += n
				if errors.Is(err, context.Canceled) {
					return 130, err
				}
				if err != nil {
					failed++
				}
			}
		}
	}
	switch {
	case measured == 0:
		return 1, errors.New("no engine could be measured")
	case failed > 0:
		return 1, fmt.Errorf("%d runs failed", failed)
	}
	return 0, nil
}

// tcryptBlock measures one mode in one direction on e for every key size,
// printing tcrypt's header and test lines, and returns how many key sizes
// were measured. An engine that cannot serve a key size gets tcrypt's
// "failed to load transform" line; an engine that fails mid-run ends the
// block with the error.
func tcryptBlock(ctx context.Context, w io.Writer, e engine.Engine, m engine.Mode, d engine.Direction, sizes []int, secs time.Duration) (int, error) {
	dir := "encryption"
	if d == engine.Decrypt {
		dir = "decryption"
	}
	header := "" // the driver of the last header printed
	test, measured := 0, 0
	for _, bits := range []int{128, 192, 256} {
		c := engine.Cipher{Mode: m, KeyBits: bits}
		if _, err := e.Driver(c); err != nil {
			fmt.Fprintf(w, "tcrypt: failed to load transform for %s (%d bit key) on %s: %v\n", c.KernelName(), bits, e.Name(), err)
			test += len(sizes)
			continue
		}
		// tcrypt rounds a size up to the cipher's block size (1420 bytes
		// are 1424 in cbc(aes)).
		bs := sizes
		if c.Blocks() {
			bs = make([]int, len(sizes))
			for i, s := range sizes {
				bs[i] = (s + engine.BlockSize - 1) &^ (engine.BlockSize - 1)
			}
		}
		_, _, err := speed.Run(ctx, e, speed.Config{
			Cipher: c, Direction: d, Sizes: bs, Duration: secs,
			Ready: func(drv engine.Driver) {
				if drv.Name == header {
					return
				}
				header = drv.Name
				mode := "sync"
				if drv.Async {
					mode = "async"
				}
				fmt.Fprintf(w, "tcrypt:\ntesting speed of %s %s (%s) %s\n", mode, c.KernelName(), drv.Name, dir)
			},
			Start: func(size int) {
				fmt.Fprintf(w, "tcrypt: test %d (%d bit key, %d byte blocks): ", test, bits, size)
			},
			Done: func(r speed.Result) {
				fmt.Fprintf(w, "%d operations in %d seconds (%d bytes)\n", r.Ops, int(secs.Seconds()), r.Ops*int64(r.Size))
				test++
			},
		})
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				fmt.Fprintf(w, "\ntcrypt: %s %s failed: %v\n", e.Name(), c, err)
			}
			return measured, err
		}
		measured++
	}
	return measured, nil
}
