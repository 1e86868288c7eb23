package main

import (
	"strings"
	"termlink/testrig/childtest"
	"testing"
)

func TestHelp(t *testing.T) {
	out, err := childtest.Command(termd, "--help").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "termd is the terminal device daemon") ||
		!strings.Contains(string(out), "Example:") || !strings.Contains(string(out), "-board-file file") {
		t.Fatalf("termd --help: %v\n%s", err, out)
	}
}
