package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"termlink/testrig/needtool"
)

// unitKeys returns the key=value lines of a systemd unit (comments out).
func unitKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' || l[0] == ';' || l[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Errorf("%s: line %q is not key=value", path, l)
			continue
		}
		out[k] = append(out[k], v)
	}
	return out
}

// Both units: no Documentation= that points nowhere (termd.service had
// a made-up URL); termserver.service is hardened, keeps its workspace in
// its StateDirectory (the one writable place), and its commands work.
func TestServiceUnits(t *testing.T) {
	t.Parallel()
	for _, unit := range []string{"termserver.service", "../termd/termd.service"} {
		for _, d := range unitKeys(t, unit)["Documentation"] {
			for _, u := range strings.Fields(d) {
				if !strings.HasPrefix(u, "man:") {
					t.Errorf("%s: Documentation=%s points nowhere that is installed", unit, u)
				}
			}
		}
	}
	k := unitKeys(t, "termserver.service")
	for key, want := range map[string]string{
		"User": "termserver", "Group": "termserver", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"ProtectHome": "yes", "PrivateTmp": "yes", "StateDirectory": "termlink", "StateDirectoryMode": "0700",
	} {
		if got := k[key]; len(got) != 1 || got[0] != want {
			t.Errorf("termserver.service: %s=%v, want %s", key, got, want)
		}
	}
	// The unit's config is examples/termserver.json, whose workspace must
	// be the state directory: nothing else is writable.
	ex, err := os.ReadFile("examples/termserver.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ex), `"workspace": "/var/lib/termlink"`) {
		t.Errorf("examples/termserver.json: workspace is not the unit's StateDirectory /var/lib/termlink")
	}
	// ExecStartPre and ExecStart, on the example instead of /etc/termlink.
	for _, key := range []string{"ExecStartPre", "ExecStart"} {
		if len(k[key]) != 1 {
			t.Fatalf("termserver.service: %s=%v", key, k[key])
		}
		args := strings.Fields(k[key][0])
		if args[0] != "/usr/local/bin/termserver" || args[len(args)-1] != "/etc/termlink/termserver.json" {
			t.Fatalf("termserver.service: %s=%s", key, k[key][0])
		}
		if key == "ExecStart" {
			args = append(args, "--version") // flags parse; nothing starts
		}
		args[len(args)-1-boolInt(key == "ExecStart")] = "examples/termserver.json"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, binary, args[1:]...).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("termserver.service %s (%v): %v\n%s", key, args[1:], err, out)
		}
	}
	// The socket unit: one listening stream socket (termserver serves
	// one, and refuses Accept=yes's connections), on the example's port.
	sk := unitKeys(t, "termserver.socket")
	if ls := sk["ListenStream"]; len(ls) != 1 || !strings.HasSuffix(ls[0], ":8080") {
		t.Errorf("termserver.socket: ListenStream=%v, want one on the example's port 8080", ls)
	}
	if a := sk["Accept"]; len(a) != 0 && a[0] != "no" {
		t.Errorf("termserver.socket: Accept=%v; termserver takes the listening socket", a)
	}
	if !strings.Contains(string(ex), `"listen": "0.0.0.0:8080"`) {
		t.Errorf("examples/termserver.json does not listen where termserver.socket does")
	}
	// systemd's own check where systemd-analyze is installed.
	sa := needtool.Path(t, "systemd-analyze", "systemd's own check of the units; apt-get install systemd")
	dir := t.TempDir()
	// termserver.service is written before termserver.socket, whose check
	// needs the service beside it.
	for _, unit := range []string{"termserver.service", "termserver.socket", "../termd/termd.service"} {
		b, _ := os.ReadFile(unit)
		// Point ExecStart at a program that exists here.
		s := strings.NewReplacer("/usr/local/bin/termserver", binary, "/usr/local/bin/termd", binary).Replace(string(b))
		p := filepath.Join(dir, filepath.Base(unit))
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, sa, "verify", "--man=no", p).CombinedOutput()
		cancel()
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, filepath.Base(unit)) {
				t.Errorf("systemd-analyze verify %s: %s", unit, l)
			}
		}
		if err != nil && len(out) == 0 {
			t.Errorf("systemd-analyze verify %s: %v", unit, err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
