// Command offload-plot draws `offload speed -json` output or a calibration
// profile (`offload calibrate`) as an SVG: throughput against block size
// for every engine, with the crossovers marked. It is a separate command
// so that the router binary stays small.
//
//	offload-plot -i profile.json -o profile.svg [-cipher aes-256-cbc] [-dir encrypt]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("offload-plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("i", "", "input: offload speed -json output or a profile (- for stdin)")
	out := fs.String("o", "-", "output SVG file (- for stdout)")
	cipher := fs.String("cipher", "", "profile table to draw: cipher (default: the first table's)")
	dir := fs.String("dir", "", "profile table to draw: encrypt or decrypt (default: the first table's)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: offload-plot -i speed.json|profile.json [-o out.svg] [-cipher C] [-dir encrypt|decrypt]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *in == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if err := plot(*in, *out, *cipher, *dir, stdout); err != nil {
		fmt.Fprintln(stderr, "offload-plot:", err)
		return 1
	}
	return 0
}

func plot(in, out, cipher, dir string, stdout io.Writer) error {
	var data []byte
	var err error
	if in == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(in)
	}
	if err != nil {
		return err
	}
	c, err := parse(data, cipher, dir)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if out == "-" {
		return writeSVG(stdout, c)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := writeSVG(f, c); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
