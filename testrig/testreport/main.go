// Command testreport reads `go test -json` on stdin and prints what plain
// `go test` prints (each package's ok/FAIL line, a failed test's output,
// build errors), then a summary of the skipped tests with their reasons,
// so a test skipped for lack of a tool (LCDd, qemu, chromium) shows
// without -v. make test pipes its go test steps through it:
//
//	go test -json ./... | go run ./testrig/testreport [-skips FILE] [-label STEP]
//
// -skips appends one line per skipped test ("STEP: SKIP pkg Test: reason")
// to FILE, -fails one line per failed test ("STEP: FAIL pkg Test: the
// first line of its failure"; a package that died without a failed
// test, its panic or build error), and -counts one line "PASSED FAILED
// SKIPPED" (tests and subtests), for make test's closing summary. The
// run ends with the skipped tests, the failed ones and "N passed, N
// failed, N skipped". The exit status is 1 when a
// test or package failed (or the input ended inside a package's run, or
// was not go test -json), else 0; run it under set -o pipefail so go
// test's own status counts too.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	skips := flag.String("skips", "", "append the skipped tests to `file` (one line each)")
	fails := flag.String("fails", "", "append the failed tests to `file` (one line each: package, test, first line of the failure)")
	counts := flag.String("counts", "", "append \"passed failed skipped\" to `file`")
	label := flag.String("label", "", "the `step` the -skips lines are prefixed with (race, armv6, ...)")
	flag.Parse()
	var out io.Writer = os.Stdout
	var sf *os.File
	if *skips != "" {
		var err error
		if sf, err = os.OpenFile(*skips, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
	}
	r := newReport(out)
	err := r.read(os.Stdin)
	r.summary()
	if sf != nil {
		for _, s := range r.skipped {
			if *label != "" {
				fmt.Fprint(sf, *label, ": ")
			}
			fmt.Fprintln(sf, s.line())
		}
		if cerr := sf.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if *fails != "" {
		var lines []string
		for _, f := range r.failures() {
			lines = append(lines, *label+map[bool]string{true: ": ", false: ""}[*label != ""]+f.line())
		}
		if len(lines) > 0 {
			if cerr := appendLine(*fails, strings.Join(lines, "\n")); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	if *counts != "" {
		if cerr := appendLine(*counts, fmt.Sprintf("%d %d %d", r.passed, r.nfailed, len(r.skipped))); cerr != nil && err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	if r.failed {
		os.Exit(1)
	}
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Output     string
}

// maxKept bounds the output kept for one test that is still running; a
// failed test's last maxKept bytes are printed.
const maxKept = 256 << 10

type key struct{ pkg, test string }

type skip struct {
	pkg, test, reason string
}

func (s skip) line() string {
	if s.reason == "" {
		return fmt.Sprintf("SKIP %s %s (no reason given)", s.pkg, s.test)
	}
	return fmt.Sprintf("SKIP %s %s: %s", s.pkg, s.test, s.reason)
}

type report struct {
	w       io.Writer
	running map[key]*buffer // output of tests not finished yet
	open    map[string]bool // packages started and not finished
	skipped []skip
	fails   []failure // in the order they failed
	passed  int       // tests and subtests
	nfailed int       // tests and subtests; a package that failed without a failed test counts one
	failed  bool      // a test, a package or the stream failed
	// pkgFailed counts the failed tests of each package, so a package
	// that fails with none (a timeout's panic, a crash, a build error)
	// still counts as a failure.
	pkgFailed map[string]int
	cutShort  int               // unfinished tests flush printed, not yet counted
	pkgOut    map[string]string // a package's first panic line
}

func newReport(w io.Writer) *report {
	return &report{w: w, running: map[key]*buffer{}, open: map[string]bool{}, pkgFailed: map[string]int{}, pkgOut: map[string]string{}}
}

// read consumes the stream; an error means the stream was not go test
// -json or ended inside a package's run (go test died).
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event (go vet, a crash before test2json): as is.
			r.w.Write(append(line, '\n'))
			continue
		}
		r.event(e)
	}
	if err := sc.Err(); err != nil {
		r.failed = true
		return err
	}
	if len(r.open) > 0 {
		r.failed = true
		for pkg := range r.open {
			r.flush(pkg)
			r.countCutShort(pkg)
		}
		return errors.New("the go test output ended before every package finished")
	}
	return nil
}

func (r *report) event(e event) {
	switch e.Action {
	case "build-output":
		io.WriteString(r.w, e.Output)
		return
	case "build-fail":
		r.failed = true
		r.fails = append(r.fails, failure{e.ImportPath, "", "build failed"})
		return
	case "start":
		r.open[e.Package] = true
		return
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			if e.Output != "PASS\n" { // plain go test prints only the ok line
				io.WriteString(r.w, e.Output)
			}
			if r.pkgOut[e.Package] == "" && strings.HasPrefix(e.Output, "panic: ") {
				r.pkgOut[e.Package] = strings.TrimSpace(e.Output)
			}
		case "pass", "skip":
			delete(r.open, e.Package)
		case "fail":
			r.failed = true
			if r.pkgFailed[e.Package] == 0 {
				r.fails = append(r.fails, failure{e.Package, "", r.pkgOut[e.Package]})
			}
			r.flush(e.Package) // tests cut short (a panic, a timeout)
			r.countCutShort(e.Package)
			delete(r.open, e.Package)
		}
		return
	}
	k := key{e.Package, e.Test}
	switch e.Action {
	case "run":
		r.running[k] = &buffer{}
	case "output":
		b := r.running[k]
		if b == nil {
			b = &buffer{}
			r.running[k] = b
		}
		b.add(e.Output)
	case "pass":
		r.passed++
		delete(r.running, k)
	case "skip":
		r.skipped = append(r.skipped, skip{e.Package, e.Test, reason(r.running[k])})
		delete(r.running, k)
	case "fail":
		r.failed = true
		r.nfailed++
		r.pkgFailed[e.Package]++
		b := r.running[k]
		r.fails = append(r.fails, failure{e.Package, e.Test, firstFailure(b)})
		if b != nil {
			b.writeTo(r.w)
		}
		delete(r.running, k)
	}
}

// flush prints the output of every unfinished test of pkg; it returns
// how many there were.
func (r *report) flush(pkg string) int {
	n := 0
	for k, b := range r.running {
		if k.pkg == pkg {
			b.writeTo(r.w)
			delete(r.running, k)
			n++
		}
	}
	r.cutShort += n
	return n
}

// countCutShort counts a failed package's failure: the tests it cut short
// (flush counted them), or the package itself when no test of it failed.
func (r *report) countCutShort(pkg string) {
	r.nfailed += r.cutShort
	if r.cutShort == 0 && r.pkgFailed[pkg] == 0 {
		r.nfailed++
	}
	r.cutShort = 0
}

// summary prints the failed tests with the first line of each failure,
// then the skipped ones with their reasons, then the counts.
func (r *report) summary() {
	if f := r.failures(); len(f) > 0 {
		fmt.Fprintf(r.w, "\n%d failed:\n", len(f))
		for _, x := range f {
			fmt.Fprintln(r.w, x.line())
		}
	}
	if len(r.skipped) > 0 {
		fmt.Fprintf(r.w, "\n%d skipped:\n", len(r.skipped))
		for _, s := range r.skipped {
			fmt.Fprintln(r.w, s.line())
		}
	}
	fmt.Fprintf(r.w, "%d passed, %d failed, %d skipped\n", r.passed, r.nfailed, len(r.skipped))
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// failure is one failed test, or a package that failed without one.
type failure struct {
	pkg, test, first string
}

func (f failure) line() string {
	what := f.pkg
	if f.test != "" {
		what += " " + f.test
	}
	if f.first == "" {
		return "FAIL " + what
	}
	return "FAIL " + what + ": " + f.first
}

// failures are the failed tests worth naming: a parent whose subtest
// failed is left out unless it said something of its own.
func (r *report) failures() []failure {
	var out []failure
	for _, f := range r.fails {
		child := false
		for _, g := range r.fails {
			if g.pkg == f.pkg && strings.HasPrefix(g.test, f.test+"/") && f.test != "" {
				child = true
			}
		}
		if child && f.first == "" {
			continue
		}
		out = append(out, f)
	}
	return out
}

// firstFailure is the first line a failed test logged ("file_test.go:12:
// message"), or its panic, cut to 200 bytes.
func firstFailure(b *buffer) string {
	if b == nil {
		return ""
	}
	for _, l := range b.lines {
		t := strings.TrimSpace(l)
		if t == "" || framing(l) || strings.HasPrefix(t, "--- ") {
			continue
		}
		if i := strings.Index(t, ": "); (i > 0 && strings.Contains(t[:i], ".go:") && !strings.Contains(t[:i], " ")) || strings.HasPrefix(t, "panic: ") {
			if len(t) > 200 {
				t = t[:200] + "..."
			}
			return t
		}
	}
	return ""
}
