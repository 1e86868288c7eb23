package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// termrig --version (and `termrig version`) prints the build's version on
// stdout and exits 0 (issue 23 row 11).
func TestVersion(t *testing.T) {
	old := version
	version = "v9.8.7-test"
	defer func() { version = old }()
	for _, arg := range []string{"--version", "-version", "version"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{arg}, &out, &errb); code != 0 {
			t.Fatalf("termrig %s: exit %d, stderr %q", arg, code, errb.String())
		}
		if !strings.HasPrefix(out.String(), "termrig v9.8.7-test\n") || !strings.Contains(out.String(), "  go      go") {
			t.Errorf("termrig %s printed %q", arg, out.String())
		}
	}
}
