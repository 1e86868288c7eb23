package main

import (
	"fmt"
	"io"
	"strings"
)

// buffer keeps one test's output lines, the last maxKept bytes of them.
type buffer struct {
	lines []string
	size  int
	cut   int // bytes dropped from the front
}

func (b *buffer) add(s string) {
	b.lines = append(b.lines, s)
	b.size += len(s)
	for b.size > maxKept && len(b.lines) > 1 {
		b.size -= len(b.lines[0])
		b.cut += len(b.lines[0])
		b.lines = b.lines[1:]
	}
}

// writeTo prints the output as plain go test shows a failed test: its
// "--- FAIL" line first, then what it logged; the === RUN/PAUSE/CONT/NAME
// lines -v adds are left out.
func (b *buffer) writeTo(w io.Writer) {
	verdict := -1
	for i, l := range b.lines {
		if strings.HasPrefix(strings.TrimLeft(l, " "), "--- FAIL") {
			verdict = i
		}
	}
	if verdict >= 0 {
		io.WriteString(w, b.lines[verdict])
	}
	if b.cut > 0 {
		fmt.Fprintf(w, "    [testreport: %d bytes of output cut]\n", b.cut)
	}
	for i, l := range b.lines {
		if i != verdict && !framing(l) {
			io.WriteString(w, l)
		}
	}
}

// framing reports whether l is a line go test -v adds around a test.
func framing(l string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// reason is what a skipped test printed (its t.Skip message), on one
// line: the test's log lines without the file:line prefix and the
// closing "--- SKIP" line.
func reason(b *buffer) string {
	if b == nil {
		return ""
	}
	var parts []string
	for _, l := range b.lines {
		t := strings.TrimSpace(l)
		if t == "" || framing(l) || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		// "file_test.go:12: message"
		if i := strings.Index(t, ": "); i > 0 && strings.Contains(t[:i], ".go:") && !strings.Contains(t[:i], " ") {
			t = t[i+2:]
		}
		parts = append(parts, t)
	}
	s := strings.Join(parts, "; ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
