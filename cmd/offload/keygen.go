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
		Short: "write a new pre-shared key file (mode 0600) for both ends",
		Usage: "-o FILE [-f]",
		Flags: func(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
			out := fs.String("o", "", "key file to write (`FILE`); - prints the key to stdout")
			force := fs.Bool("f", false, "replace FILE if it exists")
			return func(_ context.Context, env *runEnv, args []string) (int, error) {
				if len(args) != 0 || *out == "" {
					return 2, errUsage
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
				return 0, nil
			}
		},
	})
}
