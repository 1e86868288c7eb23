package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"termlink/server/agent/terminal"
	"termlink/server/config"
)

// checkConfigFile loads path as start-up does (syntax, keys, values,
// references, the TLS files it names), then checks that the program each
// agent's command starts exists (checkAgentPrograms), and reports:
// "FILE: ok" on stdout, or every problem on its own line on stderr and an
// error (exit 1).
func checkConfigFile(path string, stdout, stderr io.Writer) error {
	cfg, err := config.Load(path)
	var lines []string
	if err != nil {
		lines = strings.Split(err.Error(), "\n")
	} else {
		lines = checkAgentPrograms(path, cfg, os.Getenv("PATH"))
	}
	if len(lines) > 0 {
		for _, l := range lines {
			fmt.Fprintln(stderr, l)
		}
		n := "1 problem"
		if len(lines) > 1 {
			n = fmt.Sprintf("%d problems", len(lines))
		}
		return errors.New(path + ": " + n)
	}
	fmt.Fprintf(stdout, "%s: ok (channels: %d, agents: %d, workspace: %s)\n", path, len(cfg.Channels), len(cfg.Agents), cfg.Workspace)
	return nil
}

// checkAgentPrograms finds, as the agent runners will when they start an
// agent, the program each agent's command runs and reports each one
// that is not an executable file, in the config's error form
// ("FILE: config: agents.NAME.KIND.command: ..."), sorted by agent name:
//   - a name without a slash is looked up in the PATH the agent gets
//     (its env's PATH when it sets one, else serverPath);
//   - an absolute path must be an executable file;
//   - a relative path with a slash is taken from the directory the agent
//     runs in: the workspace (terminal, nuum) or the ACP agent's cwd.
//     A harness agent runs in a directory made per session, so its
//     relative paths are not checked.
//
// The program is the command's first word when the runner splits the
// command into words itself (no shell syntax; ACP's command with args is
// the program). A command that needs /bin/sh is checked by its first
// word when that word is a plain program name or path (after any
// VAR=value assignments); one that starts with shell syntax or a builtin
// (`cd dir && ./agent`) is not checked. Only the program is checked, not
// the files it is given (python3's script).
func checkAgentPrograms(file string, cfg *config.Config, serverPath string) []string {
	names := make([]string, 0, len(cfg.Agents))
	for name := range cfg.Agents {
		names = append(names, name)
	}
	sort.Strings(names)
	var problems []string
	for _, name := range names {
		a := cfg.Agents[name]
		var (
			kind, command, dir string
			args               []string
			env                map[string]string
		)
		switch {
		case a.Terminal != nil:
			kind, command, dir, env = "terminal", a.Terminal.Command, cfg.Workspace, a.Terminal.Env
		case a.Nuum != nil:
			kind, command, dir = "nuum", a.Nuum.Command, cfg.Workspace
		case a.ACP != nil:
			kind, command, args, env = "acp", a.ACP.Command, a.ACP.Args, a.ACP.Env
			dir = cfg.Workspace
			if c := a.ACP.Cwd; c != "" {
				if filepath.IsAbs(c) {
					dir = filepath.Clean(c)
				} else {
					dir = filepath.Join(cfg.Workspace, c)
				}
			}
		case a.Harness != nil:
			kind, command = "harness", a.Harness.Command
		default:
			continue // built in
		}
		prog := command
		if len(args) == 0 {
			prog = programOf(command)
		}
		if prog == "" {
			continue
		}
		path := serverPath
		if p, ok := env["PATH"]; ok {
			path = p
		}
		if msg := findProgram(prog, path, dir); msg != "" {
			problems = append(problems, fmt.Sprintf("%s: config: agents.%s.%s.command: %s", file, name, kind, msg))
		}
	}
	return problems
}

// programOf returns the program a command runs, or "" when that cannot
// be told without running the shell.
func programOf(command string) string {
	// {message} is never the program (the runner refuses it there);
	// elsewhere it is one argument.
	if words, ok := terminal.PlainWords(strings.ReplaceAll(command, "{message}", "m")); ok {
		return words[0]
	}
	for _, w := range strings.Fields(command) {
		if k, _, ok := strings.Cut(w, "="); ok && k != "" && !strings.ContainsAny(k, "/$'\"`") {
			continue // VAR=value before the program
		}
		if words, ok := terminal.PlainWords(w); ok && len(words) == 1 {
			return words[0]
		}
		return ""
	}
	return ""
}

// findProgram says why prog cannot be run ("" when it can), looked up as
// the runners (and sh) do: in path when it has no slash, relative to dir
// when it is relative; dir "" means relative paths are not checked.
func findProgram(prog, path, dir string) string {
	if strings.Contains(prog, "/") {
		p := prog
		if !filepath.IsAbs(p) {
			if dir == "" {
				return ""
			}
			p = filepath.Join(dir, p)
		}
		why := notExecutable(p)
		if why == "" {
			return ""
		}
		if p != prog {
			return fmt.Sprintf("program %q (relative to the agent's directory %s): %s %s", prog, dir, p, why)
		}
		return fmt.Sprintf("program %s %s", p, why)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			if dir == "" {
				continue
			}
			d = filepath.Join(dir, d)
		}
		if notExecutable(filepath.Join(d, prog)) == "" {
			return ""
		}
	}
	return fmt.Sprintf("program %q is not found on PATH (%s); install it, or give its absolute path", prog, path)
}

// notExecutable says why p is not an executable file ("" when it is).
func notExecutable(p string) string {
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "does not exist"
	case err != nil:
		return "cannot be read: " + err.Error()
	case st.IsDir():
		return "is a directory"
	case !st.Mode().IsRegular():
		return "is not a regular file"
	case st.Mode().Perm()&0o111 == 0:
		return "is not executable (chmod +x)"
	}
	return ""
}
