// Package needtool finds the external programs a test drives (LCDd,
// qemu-arm-static, gcc, tmux). A missing program skips the test with the
// reason, except in CI: when CI_REQUIRE_TOOLS=1 (set by .ci/run, which
// installs every tool the tests need) a missing program fails the test, so
// a test can never pass in CI by skipping.
package needtool

import (
	"os"
	"os/exec"
	"testing"
)

// Required reports whether missing tools fail tests (CI_REQUIRE_TOOLS=1).
func Required() bool { return os.Getenv("CI_REQUIRE_TOOLS") == "1" }

// Path returns the path of the program name, looked up in PATH (or name
// itself when it is a path). When it is missing the test is skipped, or
// failed under CI_REQUIRE_TOOLS=1; why says what the tool is for and how
// to install it.
func Path(t testing.TB, name, why string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	Missing(t, name+" not found ("+why+")")
	return ""
}

// Missing skips the test with msg, or fails it under CI_REQUIRE_TOOLS=1.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s; CI_REQUIRE_TOOLS=1, so this is a failure, not a skip", msg)
	}
	t.Skip(msg)
}
