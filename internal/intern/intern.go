// Package intern shares the string lists many connections say alike: a
// fleet's devices send the same capabilities, and 10,000 idle devices
// should hold one copy of them, not 10,000 (issue 41: idle connections
// that cost almost nothing).
package intern

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Lists hands out one shared copy of each list it has seen, up to Max
// distinct lists (a stranger sending a new list each time cannot grow it
// past that; lists past it are returned as they are). The lists it hands
// out are shared: nobody may change them (their capacity is their length,
// so an append copies).
type Lists struct {
	max int

	mu sync.Mutex
	m  map[string][]string
}

// NewLists shares up to max distinct lists.
func NewLists(max int) *Lists { return &Lists{max: max, m: map[string][]string{}} }

// Of is the shared copy of l (equal to it, element by element); nil and
// empty lists are returned as they are.
func (s *Lists) Of(l []string) []string {
	if len(l) == 0 {
		return l
	}
	var k strings.Builder // each element length-prefixed: no two lists share a key
	for _, e := range l {
		k.WriteString(strconv.Itoa(len(e)))
		k.WriteByte(':')
		k.WriteString(e)
	}
	key := k.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.m[key]; ok {
		return c
	}
	if len(s.m) >= s.max {
		return l
	}
	c := slices.Clip(slices.Clone(l))
	s.m[key] = c
	return c
}
