package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

var (
	// "$PROG" validate ...: a subcommand the init script runs.
	initSubRE = regexp.MustCompile(`"\$PROG" ([a-z][a-z-]*)`)
	// The roles the init script runs as "$PROG" ROLE -c FILE.
	initRolesRE = regexp.MustCompile(`case "\$role" in\s*\n\s*([a-z| ]+)\)`)
	initRoleCmd = regexp.MustCompile(`procd_set_param command "\$PROG" "\$1" (-[a-z]+)`)
)

// checkSource builds cmd/offload from a source tree (the feed Makefile's
// tarball, unpacked) and checks it has what that tree's init script
// uses: each subcommand it runs, each role with the flag it passes, and a
// SIGHUP reload when its reload sends HUP.
func checkSource(ctx context.Context, dir string) error {
	initPath := filepath.Join(dir, filesDir, "offload.init")
	init, err := os.ReadFile(initPath)
	if err != nil {
		return err
	}
	var subs []string
	for _, m := range initSubRE.FindAllStringSubmatch(string(init), -1) {
		subs = append(subs, m[1])
	}
	roles := initRolesRE.FindStringSubmatch(string(init))
	flag := initRoleCmd.FindStringSubmatch(string(init))
	if len(subs) == 0 || roles == nil || flag == nil {
		return fmt.Errorf("%s: found no \"$PROG\" SUBCOMMAND, no case of the roles or no procd command line: the check is out of date", initPath)
	}
	bin := filepath.Join(dir, "offload.bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/offload")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/offload in the source: %w\n%s", err, out)
	}
	usage, _ := exec.CommandContext(ctx, bin).CombinedOutput() // exits 2 with the list
	var problems []error
	has := func(sub string) bool {
		return regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(sub) + `\s`).Match(usage)
	}
	for _, sub := range subs {
		if !has(sub) {
			problems = append(problems, fmt.Errorf("the init script runs offload %s, but the source has no %q command", sub, sub))
		}
	}
	for _, role := range strings.Split(roles[1], "|") {
		role = strings.TrimSpace(role)
		if !has(role) {
			problems = append(problems, fmt.Errorf("the init script runs offload %s, but the source has no %q command", role, role))
			continue
		}
		help, _ := exec.CommandContext(ctx, bin, role, "-h").CombinedOutput()
		if !regexp.MustCompile(`(?m)^\s+` + flag[1] + `\b`).Match(help) {
			problems = append(problems, fmt.Errorf("the init script runs offload %s %s FILE, but its %s has no %s flag", role, flag[1], role, flag[1]))
		}
	}
	if strings.Contains(string(init), " HUP") {
		hup := false
		files, _ := filepath.Glob(filepath.Join(dir, "cmd", "offload", "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, _ := os.ReadFile(f)
			hup = hup || strings.Contains(string(b), "syscall.SIGHUP")
		}
		if !hup {
			problems = append(problems, errors.New("the init script's reload sends SIGHUP, but the source's cmd/offload does not handle SIGHUP (it would end the process)"))
		}
	}
	return errors.Join(problems...)
}
