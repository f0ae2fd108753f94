package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/offload-dev/offload/config"
)

func init() {
	register(&command{
		Name:  "keygen",
		Short: "write a new pre-shared key file (mode 0600) for both ends, or show a key file's fingerprint",
		Usage: "-o FILE [-f] | -fingerprint FILE",
		Flags: func(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
			out := fs.String("o", "", "key file to write (`FILE`); - prints the key to stdout")
			force := fs.Bool("f", false, "replace FILE if it exists")
			fp := fs.String("fingerprint", "", "print the fingerprint of key `FILE` (what offload status shows; never the key)")
			return func(_ context.Context, env *runEnv, args []string) (int, error) {
				if len(args) != 0 || (*out == "") == (*fp == "") {
					return 2, errUsage
				}
				if *fp != "" {
					key, err := config.LoadKey(*fp)
					if err != nil {
						return 1, err
					}
					_, err = fmt.Fprintln(env.Stdout, config.KeyFingerprint(key))
					return 0, err
				}
				key, err := config.GenerateKey()
				if err != nil {
					return 1, err
				}
				if *out == "-" {
					_, err := env.Stdout.Write(config.EncodeKey(key))
					return 0, err
				}
				if err := config.WriteKeyFile(*out, key, *force); err != nil {
					if errors.Is(err, os.ErrExist) {
						return 1, fmt.Errorf("%w (-f replaces it)", err)
					}
					return 1, err
				}
				fmt.Fprintf(env.Stderr, "wrote a new key to %s (mode 0600); copy it to the other end's key_file, keeping it private\n", *out)
				// The fingerprint on stdout, for scripts and LuCI's key button.
				_, err = fmt.Fprintln(env.Stdout, config.KeyFingerprint(key))
				return 0, err
			}
		},
	})
}
