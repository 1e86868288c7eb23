package main

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// termrig --help lists every command and every subcommand of release and
// device (each from the map that runs them, so one added later is listed
// or this fails), on stdout, and names no source file (issue 40 row 11:
// it said "(device.go)" and left out rollout, status, pause, resume,
// abort, logs and selftest).
func TestHelpListsEverySubcommand(t *testing.T) {
	a := &app{}
	for _, arg := range []string{"--help", "help", "-h"} {
		st, out, errs := termrig(context.Background(), arg)
		if st != 0 || errs != "" {
			t.Fatalf("termrig %s: exit %d, stderr %q", arg, st, errs)
		}
		if m := regexp.MustCompile(`\w+\.go\b`).FindString(out); m != "" {
			t.Errorf("termrig %s names the source file %q:\n%s", arg, m, out)
		}
		for name := range a.subcommands() {
			if !regexp.MustCompile(`(?m)^\t` + regexp.QuoteMeta(name) + ` +\S`).MatchString(out) {
				t.Errorf("termrig %s does not list %q:\n%s", arg, name, out)
			}
		}
		for parent, subs := range map[string][]string{
			"release": slices.Sorted(maps.Keys(a.releaseCommands())),
			"device":  slices.Sorted(maps.Keys(a.deviceCommands())),
		} {
			// The parent's line, then its subcommands' indented lines.
			i := strings.Index(out, "\t"+parent+" ")
			if i < 0 {
				t.Fatalf("no %s line:\n%s", parent, out)
			}
			block := out[i:]
			if end := regexp.MustCompile(`\n\t\S`).FindStringIndex(block[1:]); end != nil {
				block = block[:end[0]+1]
			}
			for _, sub := range subs {
				if !regexp.MustCompile(`(?m)^\t  ` + sub + ` +\S`).MatchString(block) {
					t.Errorf("termrig %s does not list %s %s:\n%s", arg, parent, sub, block)
				}
			}
		}
	}
	// Each summary names a command that runs.
	for parent, l := range map[string][]subSummary{"release": releaseSummaries, "device": deviceSummaries} {
		cmds := map[string]bool{}
		for n := range map[string]map[string]func(context.Context, []string) error{"release": a.releaseCommands(), "device": a.deviceCommands()}[parent] {
			cmds[n] = true
		}
		for _, s := range l {
			if !cmds[s.name] {
				t.Errorf("termrig --help lists %s %s, which does not run", parent, s.name)
			}
		}
	}
	// Every subcommand's -h answers on stdout, exit 0.
	for _, args := range [][]string{
		{"release", "rollout", "-h"}, {"release", "status", "-h"}, {"release", "pause", "-h"}, {"release", "resume", "-h"},
		{"release", "abort", "-h"}, {"device", "settings", "-h"}, {"device", "logs", "-h"}, {"device", "selftest", "-h"},
	} {
		st, out, errs := termrig(context.Background(), args...)
		if st != 0 || !strings.Contains(out, "Usage: termrig "+args[0]+" "+args[1]) || !strings.Contains(out, "-channel id") || errs != "" {
			t.Errorf("termrig %s: exit %d\n%s%s", strings.Join(args, " "), st, out, errs)
		}
	}
}

// termrig --version prints to stdout only.
func TestVersionOnStdoutOnly(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		st, out, errs := termrig(context.Background(), arg)
		if st != 0 || !strings.HasPrefix(out, "termrig ") || errs != "" {
			t.Errorf("termrig %s: exit %d, stdout %q, stderr %q", arg, st, out, errs)
		}
	}
}
