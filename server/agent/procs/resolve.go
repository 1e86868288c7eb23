package procs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// shDefaultPath is the search path sh uses when the environment has none.
const shDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// resolve finds, at start, the program of a command Exec made (its Path
// is still the name it was given), as sh would: in the PATH of the
// command's environment, a relative entry or a name with a slash taken
// from the command's directory. A program that is found and executable
// is executed directly. Anything else runs as sh -c 'exec "$@"', so that
// sh reports it in its words and with its status (127 not found, 126
// cannot execute), as it did when a shell started every agent.
func resolve(cmd *exec.Cmd) {
	if len(cmd.Args) == 0 || cmd.Path != cmd.Args[0] || cmd.Path == "" {
		return // a command exec.Command found in the server's PATH
	}
	prog := cmd.Path
	if p, ok := lookPath(prog, envPath(cmd.Env), cmd.Dir); ok {
		cmd.Path, cmd.Err = p, nil
		return
	}
	cmd.Path, cmd.Err = "/bin/sh", nil
	cmd.Args = append([]string{"/bin/sh", "-c", `exec "$@"`, prog}, cmd.Args...)
}

// lookPath returns the path to execute prog by (relative to dir when
// relative, always with a slash) and whether it names an executable file.
func lookPath(prog, path, dir string) (string, bool) {
	if strings.Contains(prog, "/") {
		return prog, executable(prog, dir)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "." // an empty entry is the current directory
		}
		p := filepath.Join(d, prog)
		if !filepath.IsAbs(p) {
			p = "./" + p
		}
		if executable(p, dir) {
			return p, true
		}
	}
	return "", false
}

func executable(p, dir string) bool {
	if !filepath.IsAbs(p) && dir != "" {
		p = filepath.Join(dir, p)
	}
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// envPath is PATH in env (the last one wins, as in exec), the process's
// own when env is nil, sh's default when there is none.
func envPath(env []string) string {
	if env == nil {
		if p, ok := os.LookupEnv("PATH"); ok {
			return p
		}
		return shDefaultPath
	}
	path, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = v, true
		}
	}
	if !found {
		return shDefaultPath
	}
	return path
}
