package cluster

import (
	"fmt"
	"testing"
)

// A KeySet holds at most its size: the oldest key goes first.
func TestKeySetBounded(t *testing.T) {
	t.Parallel()
	s := NewKeySet(3)
	k := func(i int) Key { return Key{Session: "s", MessageID: fmt.Sprint(i)} }
	for i := range 5 {
		s.Add(k(i))
		s.Add(k(i)) // twice: held once
	}
	if s.Len() != 3 {
		t.Errorf("len %d after 5 keys in a set of 3, want 3", s.Len())
	}
	for i := range 5 {
		if want := i >= 2; s.Has(k(i)) != want {
			t.Errorf("Has(%d) = %v, want %v (the two oldest dropped)", i, !want, want)
		}
	}
}
