package boards

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The board flag family: a name, a file, never both; a path in --board is
// refused with --board-file suggested.
func TestSelect(t *testing.T) {
	dir := t.TempDir()
	data, err := profiles.ReadFile("profiles/sim.json")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "my-board.json")
	bare := filepath.Join(dir, "kiosk")
	for _, f := range []string{file, bare} {
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	if err := os.WriteFile("sim", data, 0o644); err != nil { // a file named as a board
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name, file string
		want       string // error text; "" for success
	}{
		{"sim", "", ""},
		{"", file, ""},
		{"rpi-lcd2004-i2c", "", ""},
		{file, "", "--board takes a board name (known: lcdproc, "},
		{file, "", "for the profile file " + file + " use --board-file " + file},
		{"my-board.json", "", "use --board-file my-board.json"},
		{"boards/x.JSON", "", "use --board-file boards/x.JSON"},
		{"kiosk", "", "use --board-file kiosk"}, // exists as a file here
		{"no-such", "", `unknown board "no-such" (known: `},
		{"no-such", "", "a profile file goes in --board-file PATH"},
		{"sim", file, "--board sim and --board-file " + file + " exclude each other"},
		{"", filepath.Join(dir, "missing.json"), "no such file"},
		{"", "", "no board: give --board NAME"},
	} {
		p, err := Select(tt.name, tt.file)
		switch {
		case tt.want == "" && (err != nil || p == nil):
			t.Errorf("Select(%q, %q): %v", tt.name, tt.file, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("Select(%q, %q) = %v, want an error with %q", tt.name, tt.file, err, tt.want)
		}
	}
}
