//go:build unix

package terminal

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// commandText is the message text the command tests expand {message}
// with: everything sh would act on, were it not quoted.
const commandText = "it's \"$HOME\" `x` * ; | \\ \n ~ {message}"

func TestSplitCommand(t *testing.T) {
	t.Parallel()
	direct := []struct {
		template string
		argv     []string
	}{
		{"agent", []string{"agent"}},
		{"  /opt/my-agent/main --flag=1 -v  ", []string{"/opt/my-agent/main", "--flag=1", "-v"}},
		{"python3\t/opt/a.py", []string{"python3", "/opt/a.py"}},
		{"artisan chat -m {message} -v", []string{"artisan", "chat", "-m", commandText, "-v"}},
		{"a pre{message}post {message}{message}", []string{"a", "pre" + commandText + "post", commandText + commandText}},
		{"'/path with spaces/agent' 'a b'c '' x", []string{"/path with spaces/agent", "a bc", "", "x"}},
		{`'$HOME; * "q" \ ` + "\n" + `'`, []string{`$HOME; * "q" \ ` + "\n"}},
		{"./agent.sh user@host:1,2+3%", []string{"./agent.sh", "user@host:1,2+3%"}},
		{"{message}x", nil}, // the program is the text
		{"{message}", nil},
	}
	for _, tt := range direct {
		got, ok := splitCommand(tt.template)
		if tt.argv == nil {
			if ok {
				t.Errorf("splitCommand(%q) = %q, want the shell", tt.template, got.argv(commandText))
			}
			continue
		}
		if !ok {
			t.Errorf("splitCommand(%q): shell, want %q", tt.template, tt.argv)
			continue
		}
		if argv := got.argv(commandText); !reflect.DeepEqual(argv, tt.argv) {
			t.Errorf("splitCommand(%q) = %q, want %q", tt.template, argv, tt.argv)
		}
	}
	shell := []string{
		"", "   ", "a | b", "a && b", "a; b", "a & ", "a > out", "a < in", "a 2>&1", "(a)", "a $HOME", "a ${X}",
		"a `b`", "a $(b)", `a "b"`, `a \b`, "a b\nc", "a *", "a ?", "a [x]", "a ~/x", "~/agent", "a #c", "a !",
		"a {b}", "a {message", "a 'unterminated", "a '{message}'", "a 'x{message}y'", "X=1 a", "a=b", "'' a",
		"echo {message}", "exec agent", "cd /x", "if", "for", "time agent", ". ./env", ": x", "printf %s",
		"test -x a", "source x", "a\u00e9", "a\u00a0b", "a\rb", "a\vb", "a\fb",
	}
	for _, template := range shell {
		if got, ok := splitCommand(template); ok {
			t.Errorf("splitCommand(%q) = %q, want the shell", template, got.argv(commandText))
		}
	}
}

// TestSplitCommandAsShell: where splitCommand splits a template, the
// program and its arguments are those sh gets from the template expanded
// by ExpandCommand.
func TestSplitCommandAsShell(t *testing.T) {
	t.Parallel()
	bin := argvPrinter(t)
	for _, template := range []string{
		"argv", "argv a  b\tc", "argv {message}", "argv -m={message}= 'x y' '' z", "argv 'q'{message}'q'",
		"argv %s:,+@./-_ {message}{message}", "argv '$x; `y`' '\\'",
	} {
		if _, ok := splitCommand(template); !ok {
			t.Fatalf("splitCommand(%q): shell", template)
		}
		compareWithShell(t, bin, template, commandText)
	}
}

// argvPrinter installs "argv", which prints its arguments NUL-terminated,
// in a directory of its own, and returns it.
func argvPrinter(t testing.TB) string {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "argv"), []byte("#!/bin/sh\nfor a; do printf '%s\\0' \"$a\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// compareWithShell fails t when sh -c runs template (expanded with text)
// with other arguments than splitCommand gives, or when splitCommand
// names another program.
func compareWithShell(t testing.TB, bin, template, text string) {
	t.Helper()
	words, ok := splitCommand(template)
	if !ok {
		return
	}
	argv := words.argv(text)
	if argv[0] != "argv" {
		return // another program: only its name can be compared
	}
	cmd := exec.Command("/bin/sh", "-c", ExpandCommand(template, text))
	cmd.Env = []string{"PATH=" + bin}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", ExpandCommand(template, text), err)
	}
	var shArgs []string
	for _, a := range bytes.SplitAfter(out, []byte{0}) {
		if len(a) > 0 {
			shArgs = append(shArgs, string(a[:len(a)-1]))
		}
	}
	if !reflect.DeepEqual(shArgs, argv[1:]) && !(len(shArgs) == 0 && len(argv) == 1) {
		t.Fatalf("template %q with text %q: sh passes %q, splitCommand %q", template, text, shArgs, argv[1:])
	}
}

// FuzzSplitCommand: splitCommand never panics, and what it splits sh
// splits the same way (for templates that run "argv").
func FuzzSplitCommand(f *testing.F) {
	for _, s := range []string{"argv {message}", "argv 'a b' c{message}d", "argv $x", "argv 'x", "a=b", "argv ''"} {
		f.Add(s, "it's $x")
	}
	bin := argvPrinter(f)
	f.Fuzz(func(t *testing.T, template, text string) {
		if strings.ContainsRune(template, 0) {
			return // New rejects it
		}
		if words, ok := splitCommand(template); ok {
			if argv := words.argv(text); len(argv) == 0 || argv[0] == "" {
				t.Fatalf("%q: empty program", template)
			}
			compareWithShell(t, bin, template, text)
		}
	})
}
