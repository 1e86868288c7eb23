package intern

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"
)

func TestLists(t *testing.T) {
	s := NewLists(2)
	a := s.Of([]string{"text", "stream"})
	b := s.Of([]string{"text", "stream"})
	if !slices.Equal(a, []string{"text", "stream"}) || unsafe.SliceData(a) != unsafe.SliceData(b) {
		t.Fatalf("equal lists not shared: %v at %p, %v at %p", a, unsafe.SliceData(a), b, unsafe.SliceData(b))
	}
	if cap(a) != len(a) {
		t.Fatalf("a shared list has room (cap %d, len %d): an append would write into it", cap(a), len(a))
	}
	if c := s.Of([]string{"text\x00stream"}); slices.Equal(c, a) {
		t.Fatal("a different list read as a shared one")
	}
	// Past max distinct lists, lists come back as they are.
	l := []string{"x"}
	if got := s.Of(l); unsafe.SliceData(got) != unsafe.SliceData(l) {
		t.Fatalf("list %v interned past the bound", got)
	}
	for i := range 10 {
		s.Of([]string{fmt.Sprint(i)})
	}
	if n := len(s.m); n != 2 {
		t.Fatalf("%d lists kept, want the bound 2", n)
	}
	if got := s.Of(nil); got != nil {
		t.Fatalf("nil came back as %v", got)
	}
}
