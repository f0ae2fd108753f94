package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand: its flags, and Run, which gets the remaining
// arguments and returns the process exit code and an error to print.
type command struct {
	Name  string
	Short string // one line for the command list
	Usage string // argument synopsis, after "offload NAME "
	Flags func(fs *flag.FlagSet) func(ctx context.Context, env *runEnv, args []string) (int, error)
}

// runEnv is what every command gets instead of globals.
type runEnv struct {
	Stdout, Stderr io.Writer
}

var commands = map[string]*command{}

func register(c *command) { commands[c.Name] = c }

// errUsage makes run print the command's usage and exit 2.
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	// Help that was asked for goes to stdout (offload -h | less) and
	// exits 0; help after a mistake goes to stderr and exits 2.
	if len(args) == 0 {
		printCommands(stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		printCommands(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "offload: unknown command %q\n\n", args[0])
		printCommands(stderr)
		return 2
	}
	fs := flag.NewFlagSet("offload "+cmd.Name, flag.ContinueOnError)
	// The flag package writes a parse error and the usage before Parse
	// returns; which stream they belong on is known only after.
	var parseOut bytes.Buffer
	fs.SetOutput(&parseOut)
	runFn := cmd.Flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: offload %s %s\n\n%s\n\nflags:\n", cmd.Name, cmd.Usage, cmd.Short)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = stdout.Write(parseOut.Bytes())
			return 0
		}
		_, _ = stderr.Write(parseOut.Bytes())
		return 2
	}
	fs.SetOutput(stderr)
	// One place cancels on SIGINT/SIGTERM, as restic does.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := runFn(ctx, &runEnv{Stdout: stdout, Stderr: stderr}, fs.Args())
	if errors.Is(err, errUsage) {
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "offload %s: %v\n", cmd.Name, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func printCommands(w io.Writer) {
	fmt.Fprintln(w, "usage: offload COMMAND [flags] [args]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].Short)
	}
	fmt.Fprintln(w, "\nRun 'offload COMMAND -h' for a command's flags.")
}
