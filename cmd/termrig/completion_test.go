package main

// The shell completions in completions/ (issue 40 row 11) are generated
// from the commands' own help: termrig's in this process, termd's and
// termserver's from the binaries built here. TestCompletionFiles fails
// when a file is not what the help makes of it (a flag added, renamed or
// removed), and -update rewrites them:
//
//	go test ./cmd/termrig -run TestCompletionFiles -update

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var updateCompletions = flag.Bool("update", false, "rewrite completions/*.bash from the commands' help")

// compFlag is one flag as a help prints it: its name and, for one that
// takes a value, the value's name (file, dir, URL, N...).
type compFlag struct{ name, arg string }

// flagLineRE is a flag's line in flag.PrintDefaults: "  -name arg" (the
// usage on the next line), or "  -x\tusage" for a one-letter name.
var flagLineRE = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9._-]*)(?: ([^\s]+))?(?:\t.*)?$`)

// helpFlags are the flags a help text prints.
func helpFlags(help string) []compFlag {
	var out []compFlag
	for _, m := range flagLineRE.FindAllStringSubmatch(help, -1) {
		out = append(out, compFlag{m[1], m[2]})
	}
	return out
}

// compCase is what one command line (key: "", "release", "release
// rollout") completes: its words (subcommands, then --flags), and which
// flags take a file, a directory or another value.
type compCase struct {
	key                 string
	words               []string
	files, dirs, values []string
}

func newCompCase(key string, subs []string, flags []compFlag) compCase {
	c := compCase{key: key, words: slices.Clone(subs)}
	for _, f := range flags {
		opt := "--" + f.name
		c.words = append(c.words, opt)
		switch strings.ToLower(f.arg) {
		case "":
		case "file":
			c.files = append(c.files, opt)
		case "dir", "directory":
			c.dirs = append(c.dirs, opt)
		default:
			c.values = append(c.values, opt)
		}
	}
	return c
}

// bashCompletion is a command's bash completion script. nested lists the
// commands whose second word is a subcommand (termrig release, device).
func bashCompletion(name string, nested []string, cases []compCase) string {
	fn := "_" + strings.ReplaceAll(name, "-", "_") + "_complete"
	var b strings.Builder
	fmt.Fprintf(&b, `# bash completion for %[1]s: its commands and flags.
# Generated from %[1]s's own help by TestCompletionFiles in cmd/termrig
# (go test ./cmd/termrig -run TestCompletionFiles -update); do not edit.
# bash: source this file, or copy it to ~/.local/share/bash-completion/completions/%[1]s
# zsh:  autoload -U +X bashcompinit && bashcompinit && source this file

%[2]s() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} key=""
	[[ $cur == -*=* ]] && return 0 # --flag=value: the shell's own completion
`, name, fn)
	if len(cases) > 1 {
		b.WriteString("\t((COMP_CWORD >= 2)) && key=${COMP_WORDS[1]}\n")
	}
	if len(nested) > 0 {
		fmt.Fprintf(&b, "\tcase $key in %s) ((COMP_CWORD >= 3)) && key=\"$key ${COMP_WORDS[2]}\" ;; esac\n", strings.Join(nested, "|"))
	}
	b.WriteString("\tlocal words=\"\" files=\"\" dirs=\"\" values=\"\"\n\tcase $key in\n")
	for _, c := range cases {
		fmt.Fprintf(&b, "\t%q)\n\t\twords=%q\n", c.key, strings.Join(c.words, " "))
		for _, v := range []struct {
			name string
			l    []string
		}{{"files", c.files}, {"dirs", c.dirs}, {"values", c.values}} {
			if len(v.l) > 0 {
				fmt.Fprintf(&b, "\t\t%s=%q\n", v.name, strings.Join(v.l, " "))
			}
		}
		b.WriteString("\t\t;;\n")
	}
	fmt.Fprintf(&b, `	esac
	if [[ " $files " == *" $prev "* ]]; then
		return 0 # a file name: the shell's own completion
	elif [[ " $dirs " == *" $prev "* ]]; then
		local IFS=$'\n' # a directory's name may hold spaces
		COMPREPLY=($(compgen -d -- "$cur"))
		return 0
	elif [[ " $values " == *" $prev "* ]]; then
		compopt +o default 2>/dev/null # a value: nothing to offer
		return 0
	fi
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F %s %s
`, fn, name)
	return b.String()
}

// termrigCases are termrig's completions, from its help in this process.
func termrigCases(t *testing.T) []compCase {
	a := &app{}
	help := func(args ...string) string {
		st, out, errs := termrig(context.Background(), append(args, "-h")...)
		if st != 0 {
			t.Fatalf("termrig %s -h: exit %d %s", strings.Join(args, " "), st, errs)
		}
		return out
	}
	cmds := slices.Sorted(maps.Keys(a.subcommands()))
	nested := map[string][]string{
		"release": slices.Sorted(maps.Keys(a.releaseCommands())),
		"device":  slices.Sorted(maps.Keys(a.deviceCommands())),
	}
	cases := []compCase{
		newCompCase("", append(slices.Clone(cmds), "help", "--help", "--version"), nil),
		newCompCase("help", cmds, nil),
	}
	for _, cmd := range cmds {
		subs, ok := nested[cmd]
		if !ok {
			cases = append(cases, newCompCase(cmd, nil, helpFlags(help(cmd))))
			continue
		}
		cases = append(cases, newCompCase(cmd, subs, nil))
		for _, sub := range subs {
			cases = append(cases, newCompCase(cmd+" "+sub, nil, helpFlags(help(cmd, sub))))
		}
	}
	return cases
}

// builtHelp builds termd and termserver and returns their --help.
func builtHelp(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", dir, "termlink/cmd/termd", "termlink/cmd/termserver").CombinedOutput(); err != nil {
		t.Fatalf("building termd and termserver: %v\n%s", err, out)
	}
	help := map[string]string{}
	for _, name := range []string{"termd", "termserver"} {
		out, err := exec.CommandContext(ctx, filepath.Join(dir, name), "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v\n%s", name, err, out)
		}
		help[name] = string(out)
	}
	return help
}

// The completion files are what the commands' help makes of them, and
// name every flag each help prints (termrig's subcommands' included).
func TestCompletionFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds termd and termserver to read their --help")
	}
	t.Parallel()
	help := builtHelp(t)
	want := map[string]string{
		"termrig.bash":    bashCompletion("termrig", []string{"release", "device"}, termrigCases(t)),
		"termd.bash":      bashCompletion("termd", nil, []compCase{newCompCase("", nil, helpFlags(help["termd"]))}),
		"termserver.bash": bashCompletion("termserver", nil, []compCase{newCompCase("", []string{"export-sessions"}, helpFlags(help["termserver"]))}),
	}
	dir := filepath.Join("..", "..", "completions")
	for file, text := range want {
		path := filepath.Join(dir, file)
		if *updateCompletions {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./cmd/termrig -run TestCompletionFiles -update writes it)", err)
		}
		if !bytes.Equal(got, []byte(text)) {
			t.Errorf("completions/%s is not what the help makes of it: run go test ./cmd/termrig -run TestCompletionFiles -update", file)
		}
	}
	// Every flag each help prints is in its file (what the equality
	// above implies, said flag by flag).
	for name, h := range map[string]string{"termd": help["termd"], "termserver": help["termserver"]} {
		if len(helpFlags(h)) < 5 {
			t.Errorf("%s --help: found %d flags in\n%s", name, len(helpFlags(h)), h)
		}
		for _, f := range helpFlags(h) {
			if !strings.Contains(want[name+".bash"], "--"+f.name+" ") && !strings.Contains(want[name+".bash"], "--"+f.name+"\"") {
				t.Errorf("completions/%s.bash lacks --%s", name, f.name)
			}
		}
	}
}

// The bash completion completes commands, subcommands, flags and
// directory values, run by bash itself (candidates joined by |).
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	t.Parallel()
	dir := filepath.Join("..", "..", "completions")
	wd := t.TempDir()
	_ = os.Mkdir(filepath.Join(wd, "state"), 0o755)
	_ = os.Mkdir(filepath.Join(wd, "my state"), 0o755)
	_ = os.WriteFile(filepath.Join(wd, "stray"), nil, 0o644)
	for _, tc := range []struct {
		file  string
		words []string
		want  string
	}{
		{"termrig.bash", []string{"termrig", "a"}, ""}, // abort is release's, not termrig's
		{"termrig.bash", []string{"termrig", "rel"}, "release"},
		{"termrig.bash", []string{"termrig", "release", ""}, "abort|delete|delta|keygen|list|pause|resume|rollout|sign|status|upload|verify"},
		{"termrig.bash", []string{"termrig", "release", "ro"}, "rollout"},
		{"termrig.bash", []string{"termrig", "release", "rollout", "--ch"}, "--channel"},
		{"termrig.bash", []string{"termrig", "device", "logs", "--p"}, "--peer"},
		{"termrig.bash", []string{"termrig", "device", ""}, "logs|selftest|settings"},
		{"termrig.bash", []string{"termrig", "help", "dev"}, "device"},
		{"termrig.bash", []string{"termrig", "demo", "--workspace", "s"}, "state"},
		{"termrig.bash", []string{"termrig", "load", "--rate", ""}, ""},
		{"termd.bash", []string{"termd", "--sup"}, "--supervise"},
		{"termd.bash", []string{"termd", "--board", "sim", "--state-dir", "s"}, "state"},
		{"termd.bash", []string{"termd", "--state-dir", "my"}, "my state"},
		{"termserver.bash", []string{"termserver", "--check"}, "--check-config"},
		{"termserver.bash", []string{"termserver", "--config", "c.json", "exp"}, "export-sessions"},
	} {
		script := fmt.Sprintf("source %q\nCOMP_WORDS=(%s)\nCOMP_CWORD=%d\n_%s_complete\nIFS='|'\necho \"${COMPREPLY[*]}\"\n",
			filepath.Join(must(filepath.Abs(dir)), tc.file), shellWords(tc.words), len(tc.words)-1, tc.words[0])
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", script)
		cmd.Dir = wd
		out, err := cmd.CombinedOutput()
		got := strings.TrimSpace(string(out))
		if err != nil || got != tc.want {
			t.Errorf("%s completes %q as %q (%v), want %q", tc.file, tc.words, got, err, tc.want)
		}
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// shellWords quotes words for a bash array.
func shellWords(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
