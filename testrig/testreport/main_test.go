package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// goTestJSON runs the real go test -json on testdata/sample.
func goTestJSON(t *testing.T, fail bool) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-json", "./testdata/sample")
	cmd.Env = append(os.Environ(), "TESTREPORT_SAMPLE_FAIL=")
	if fail {
		cmd.Env = append(cmd.Env, "TESTREPORT_SAMPLE_FAIL=1")
	}
	out, err := cmd.Output()
	if _, ok := err.(*exec.ExitError); err != nil && !(ok && fail) {
		t.Fatalf("go test -json: %v\n%s", err, out)
	}
	return out
}

func TestPassingPackage(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out)
	if err := r.read(bytes.NewReader(goTestJSON(t, false))); err != nil {
		t.Fatal(err)
	}
	r.summary()
	s := out.String()
	if r.failed {
		t.Errorf("failed with every test passing or skipped:\n%s", s)
	}
	for _, want := range []string{
		"ok  \ttermlink/testrig/testreport/testdata/sample\t",
		"\n2 skipped:\n",
		"SKIP termlink/testrig/testreport/testdata/sample TestSkips: frobnicator is not installed (apt-get install frobnicator)\n",
		"SKIP termlink/testrig/testreport/testdata/sample TestSubtests/skips: needs a jumper\n",
		"\n4 passed, 0 failed, 2 skipped\n", // tests and subtests
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	// Plain go test's quiet output: no -v framing, no passing test's log.
	for _, not := range []string{"=== RUN", "chatter of a passing test", "--- PASS", "\nPASS\n"} {
		if strings.Contains(s, not) {
			t.Errorf("output has %q:\n%s", not, s)
		}
	}
}

func TestFailingPackage(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out)
	if err := r.read(bytes.NewReader(goTestJSON(t, true))); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !r.failed {
		t.Errorf("a failed test did not fail the report:\n%s", s)
	}
	// As plain go test: the verdict line, then the test's log.
	for _, want := range []string{"--- FAIL: TestFails (", "s)\n    sample_test.go:27: what went wrong\n", "the expected failure",
		"FAIL\ttermlink/testrig/testreport/testdata/sample\t"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "=== RUN") {
		t.Errorf("output has -v framing:\n%s", s)
	}
	// The summary names each failed test with its package and the first
	// line it logged, before the skips.
	out.Reset()
	r.summary()
	if s = out.String(); !strings.Contains(s, "\n1 failed:\nFAIL termlink/testrig/testreport/testdata/sample TestFails: sample_test.go:27: what went wrong\n") ||
		strings.Index(s, "skipped:") < strings.Index(s, "failed:") {
		t.Errorf("summary:\n%s", s)
	}
}

// go test killed halfway (its stream ends inside a package): a failure,
// with what the unfinished tests printed.
func TestCutStreamFails(t *testing.T) {
	in := goTestJSON(t, true)
	i := bytes.Index(in, []byte(`"Action":"fail","Package":"termlink/testrig/testreport/testdata/sample","Test":"TestFails"`))
	if i < 0 {
		t.Fatalf("no fail event in\n%s", in)
	}
	in = in[:bytes.LastIndexByte(in[:i], '\n')+1]
	var out bytes.Buffer
	r := newReport(&out)
	if err := r.read(bytes.NewReader(in)); err == nil || !r.failed {
		t.Fatalf("cut stream: err %v, failed %v", err, r.failed)
	}
	if !strings.Contains(out.String(), "the expected failure") {
		t.Errorf("the unfinished test's output is not shown:\n%s", out.String())
	}
}

// Lines that are not events (go vet, a crash before test2json) pass
// through.
func TestNonJSONPassesThrough(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out)
	if err := r.read(strings.NewReader("# termlink/x\nx.go:1: bad\n")); err != nil {
		t.Fatal(err)
	}
	if out.String() != "# termlink/x\nx.go:1: bad\n" {
		t.Errorf("got %q", out.String())
	}
}

func TestBufferKeepsTheTail(t *testing.T) {
	var b buffer
	line := strings.Repeat("x", 1023) + "\n"
	for range 2 * maxKept / len(line) {
		b.add(line)
	}
	b.add("the end\n")
	var out bytes.Buffer
	b.writeTo(&out)
	if out.Len() > maxKept+100 || !strings.HasSuffix(out.String(), "the end\n") || !strings.Contains(out.String(), "bytes of output cut") {
		t.Errorf("kept %d bytes, tail %q", out.Len(), out.String()[max(0, out.Len()-20):])
	}
}

// A package that dies (a test binary's timeout panic) fails the run and
// counts: the test it cut short is a failed test, and a package that
// fails with no test at all (a crash in TestMain, say) counts as one.
// (CI once closed with "tests: 3522 passed, 0 failed" after server's
// test binary timed out.)
func TestDeadPackageCounts(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestOK"}`,
		`{"Action":"pass","Package":"p","Test":"TestOK"}`,
		`{"Action":"run","Package":"p","Test":"TestHangs"}`,
		`{"Action":"output","Package":"p","Test":"TestHangs","Output":"=== RUN   TestHangs\n"}`,
		`{"Action":"output","Package":"p","Output":"panic: test timed out after 10m0s\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t600.034s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":600.034}`,
		`{"Action":"start","Package":"q"}`,
		`{"Action":"output","Package":"q","Output":"FAIL\tq\t0.01s\n"}`,
		`{"Action":"fail","Package":"q","Elapsed":0.01}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	r := newReport(&out)
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	r.summary()
	if !r.failed || !strings.Contains(out.String(), "\n1 passed, 2 failed, 0 skipped\n") {
		t.Fatalf("failed=%v, output:\n%s\nwant 1 passed, 2 failed", r.failed, out.String())
	}
	if !strings.Contains(out.String(), "FAIL p: panic: test timed out after 10m0s\nFAIL q\n") {
		t.Fatalf("the dead packages are not named in the summary:\n%s", out.String())
	}
}
