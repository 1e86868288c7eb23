// Package sample is the input of testreport's tests: a passing, a
// skipped and (with TESTREPORT_SAMPLE_FAIL=1) a failing test.
package sample

import (
	"os"
	"testing"
)

func TestPasses(t *testing.T) {
	t.Log("chatter of a passing test")
}

func TestSkips(t *testing.T) {
	t.Skip("frobnicator is not installed (apt-get install frobnicator)")
}

func TestSubtests(t *testing.T) {
	t.Run("runs", func(t *testing.T) {})
	t.Run("skips", func(t *testing.T) { t.Skipf("needs %s", "a jumper") })
}

func TestFails(t *testing.T) {
	if os.Getenv("TESTREPORT_SAMPLE_FAIL") != "1" {
		return
	}
	t.Log("what went wrong")
	t.Fatal("the expected failure")
}
