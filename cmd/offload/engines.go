package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/offload-dev/offload/engine"
)

func init() {
	register(&command{
		Name:  "engines",
		Short: "list engines, their ciphers and kernel drivers, like 'openssl engine -c -t'",
		Usage: "[-json]",
		Flags: func(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
			asJSON := fs.Bool("json", false, "print JSON for machines")
			return func(_ context.Context, env *runEnv, args []string) (int, error) {
				if len(args) != 0 {
					return 2, errUsage
				}
				list := listEngines()
				if *asJSON {
					enc := json.NewEncoder(env.Stdout)
					enc.SetIndent("", "  ")
					return 0, enc.Encode(list)
				}
				for _, e := range list {
					fmt.Fprintf(env.Stdout, "(%s) %s\n", e.Engine, e.Description)
					if e.Note != "" {
						fmt.Fprintf(env.Stdout, "     note: %s\n", e.Note)
					}
					var ok []string
					for _, c := range e.Ciphers {
						if c.Driver != nil {
							ok = append(ok, strings.ToUpper(c.Cipher))
						}
					}
					if len(ok) > 0 {
						fmt.Fprintf(env.Stdout, " [%s]\n", strings.Join(ok, ", "))
					}
					for _, c := range e.Ciphers {
						if c.Driver != nil {
							fmt.Fprintf(env.Stdout, "     %-12s %s\n", c.Cipher, describeDriver(*c.Driver))
						}
					}
					switch {
					case len(ok) == len(e.Ciphers):
						fmt.Fprintln(env.Stdout, "     [ available ]")
					case len(ok) > 0:
						fmt.Fprintf(env.Stdout, "     [ available for %d of %d ciphers ]\n", len(ok), len(e.Ciphers))
					default:
						fmt.Fprintf(env.Stdout, "     [ unavailable: %s ]\n", e.Ciphers[0].Unavailable)
					}
				}
				return 0, nil
			}
		},
	})
}

type engineInfo struct {
	Engine      string `json:"engine"`
	Description string `json:"description"`
	// Note, on the plain afalg engine, says what this kernel lets AF_ALG
	// reach when that is only CPU code (engine.KernelAFALGNote).
	Note    string         `json:"note,omitempty"`
	Ciphers []cipherStatus `json:"ciphers"`
}

type cipherStatus struct {
	Cipher      string         `json:"cipher"`
	Driver      *engine.Driver `json:"driver,omitempty"`
	Unavailable string         `json:"unavailable,omitempty"`
}

// listEngines is every engine engine.All finds for any cipher (the
// registry's engines and each kernel driver), each described by the
// registry, with the driver that serves every cipher or the reason it
// cannot.
func listEngines() []engineInfo {
	var names []string
	seen := map[string]engine.Engine{}
	for _, c := range engine.Ciphers {
		for _, e := range engine.All(c, engine.Options{}) {
			if _, ok := seen[e.Name()]; !ok {
				seen[e.Name()] = e
				names = append(names, e.Name())
			}
		}
	}
	var out []engineInfo
	for _, n := range names {
		e := seen[n]
		info := engineInfo{Engine: n, Description: engine.Describe(n)}
		if n == engine.AFALGName {
			info.Note = engine.KernelAFALGNote()
		}
		for _, c := range engine.Ciphers {
			st := cipherStatus{Cipher: c.String()}
			if d, err := e.Driver(c); err != nil {
				st.Unavailable = err.Error()
			} else {
				st.Driver = &d
			}
			info.Ciphers = append(info.Ciphers, st)
		}
		out = append(out, info)
	}
	return out
}
