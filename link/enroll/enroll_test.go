package enroll

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewCode(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		c, err := NewCode()
		if err != nil {
			t.Fatal(err)
		}
		if len(c) != 7 || c[3] != '-' || strings.ContainsAny(c, "01OI") {
			t.Fatalf("code %q", c)
		}
		if p, err := ParseCode(c); err != nil || p != c {
			t.Fatalf("ParseCode(%q) = %q, %v", c, p, err)
		}
		seen[c] = true
	}
	if len(seen) < 190 {
		t.Fatalf("only %d different codes of 200", len(seen))
	}
}

func TestParseCode(t *testing.T) {
	for in, want := range map[string]string{"K7Q-4MX": "K7Q-4MX", "k7q4mx": "K7Q-4MX", " k7q 4mx ": "K7Q-4MX", "K-7-Q-4-M-X": "K7Q-4MX"} {
		if got, err := ParseCode(in); err != nil || got != want {
			t.Errorf("ParseCode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"K7Q-4M":   "this one has 5",
		"K7Q-4MXX": "this one has more",
		"K0Q-4MX":  "codes never use 0, O, 1 or I",
		"KIQ-4MX":  "codes never use 0, O, 1 or I",
		"K7Q_4MX":  `cannot hold '_'`,
		"":         "this one has 0",
		"K7Q-4MÄ":  `cannot hold 'Ä'`,
	} {
		if _, err := ParseCode(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCode(%q) error %v, want %q", in, err, want)
		}
	}
}

func FuzzParseCode(f *testing.F) {
	for _, s := range []string{"K7Q-4MX", "k7q4mx", "", "0O1I", "K7Q-4MX-", "ÄÄÄ-ÄÄÄ", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCode(s)
		if err != nil {
			return
		}
		if len(c) != 7 || c[3] != '-' {
			t.Fatalf("ParseCode(%q) = %q", s, c)
		}
		for i, r := range c {
			if i != 3 && !strings.ContainsRune(Alphabet, r) {
				t.Fatalf("ParseCode(%q) = %q holds %q", s, c, r)
			}
		}
		if again, err := ParseCode(c); err != nil || again != c {
			t.Fatalf("not stable: %q -> %q -> %q, %v", s, c, again, err)
		}
	})
}

func TestEndpointFor(t *testing.T) {
	for in, want := range map[string]string{
		"ws://h:8080/api/channels/terminal-dev/ws": "http://h:8080/api/channels/terminal-dev/enroll",
		"wss://h/api/channels/k/ws?x=1":            "https://h/api/channels/k/enroll",
		"https://h/api/channels/k/ws":              "https://h/api/channels/k/enroll",
	} {
		if got, err := EndpointFor(in); err != nil || got != want {
			t.Errorf("EndpointFor(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ftp://h/api/channels/k/ws", "ws://h/other", "ws://h/api/channels/k"} {
		if _, err := EndpointFor(bad); err == nil {
			t.Errorf("EndpointFor(%q): no error", bad)
		}
	}
}

func TestTokenFilePermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path, err := SaveToken(dir, "tl_secret")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	if tok, err := ReadTokenFile(path); err != nil || tok != "tl_secret" {
		t.Fatalf("ReadTokenFile: %q %v", tok, err)
	}
	// A state dir made loose by hand is tightened by the next save.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := SaveToken(dir, "tl_other"); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir mode %v after a save, want 0700", fi.Mode().Perm())
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := ReadTokenFile(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Fatalf("mode %04o: error %v, want one naming the file and the chmod fix", mode, err)
		}
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTokenFile(path); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("empty token file: %v", err)
	}
}
