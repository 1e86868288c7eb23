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

// make test on the sample package through the real Makefile: a failing
// test fails make (pipefail through testreport), every step still runs,
// and the end names the failed step and lists the skipped tests.
func TestMakeTestReportsStepsAndSkips(t *testing.T) {
	mk := needtool.Path(t, "make", "the Makefile's test target (apt-get install make)")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	runMake := func(fail string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, mk, "--no-print-directory", "-C", root, "test",
			"STEPS=race vet", "PKGS=./testrig/testreport/testdata/sample")
		cmd.Env = append(os.Environ(), "TESTREPORT_SAMPLE_FAIL="+fail, "MAKEFLAGS=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := runMake("1")
	if err == nil {
		t.Fatalf("make test passed with a failing test:\n%s", out)
	}
	for _, want := range []string{
		"FAIL\ttermlink/testrig/testreport/testdata/sample\t", // go test's own closing line
		"--- FAIL: TestFails",
		"== make vet\n", // the step after the failed one ran
		"race: SKIP termlink/testrig/testreport/testdata/sample TestSkips: frobnicator is not installed",
		"failed (1):\nrace: FAIL termlink/testrig/testreport/testdata/sample TestFails: sample_test.go:27: what went wrong\nskipped (2):\n",
		"make test: FAILED: race (passed: vet)\ntests: 3 passed, 1 failed, 2 skipped\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("failing make test: output lacks %q:\n%s", want, out)
		}
	}
	out, err = runMake("")
	if err != nil {
		t.Fatalf("make test failed with passing tests: %v\n%s", err, out)
	}
	for _, want := range []string{
		"ok  \ttermlink/testrig/testreport/testdata/sample\t",
		"skipped (2):\n",
		"race: SKIP termlink/testrig/testreport/testdata/sample TestSubtests/skips: needs a jumper",
		"make test: every step passed (race vet)\ntests: 4 passed, 0 failed, 2 skipped\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("passing make test: output lacks %q:\n%s", want, out)
		}
	}
}
