package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"termlink/testrig/childtest"
)

// termd's board flags, the family termrig shares: a profile file given to
// --board is refused with --board-file suggested, both flags at once are
// refused, and an unknown name points at --board-file.
func TestTermdBoardFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "my-board.json")
	if err := os.WriteFile(file, []byte(`{"name": "mine"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--board", file}, "for the profile file " + file + " use --board-file " + file},
		{[]string{"--board", "lobby.json"}, "use --board-file lobby.json"},
		{[]string{"--board", "sim", "--board-file", file}, "--board sim and --board-file " + file + " exclude each other"},
		{[]string{"--board", "rpi-lcd9999"}, `unknown board "rpi-lcd9999" (known: `},
		{[]string{"--board", "rpi-lcd9999"}, "a profile file goes in --board-file PATH"},
	} {
		args := append([]string{"--server", "ws://127.0.0.1:1", "--state-dir", t.TempDir()}, tt.args...)
		out, err := childtest.Command(termd, args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), tt.want) {
			t.Errorf("termd %v: %v\n%s\nwant exit 1 and %q", tt.args, err, out, tt.want)
		}
	}
}
