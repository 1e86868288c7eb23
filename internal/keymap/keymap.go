// Package keymap is the grammar of keypad keys shared by board profiles
// (boards) and the keypad and text-entry code (device/input): a Keymap
// labels the keys of a matrix keypad row by row (["123A", "456B", "789C",
// "*0#D"]), a Binding ties a function to a key pressed ("#") or held
// ("hold:*"), and Keys binds the text-entry functions.
package keymap

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Keymap gives the label of each key of a matrix keypad, by row then
// column, as printed on the keypad ('0'-'9', 'A'-'D', '*', '#').
type Keymap [][]rune

// Keymap4x4 is the usual 16-key membrane keypad.
func Keymap4x4() Keymap { return mustKeymap("123A", "456B", "789C", "*0#D") }

// Keymap3x4 is the usual 12-key telephone keypad (4 rows, 3 columns).
func Keymap3x4() Keymap { return mustKeymap("123", "456", "789", "*0#") }

func mustKeymap(rows ...string) Keymap {
	km, err := Parse(rows)
	if err != nil {
		panic(err)
	}
	return km
}

// Parse builds a Keymap from one string per row, one character per key,
// as board profiles store it: ["123A", "456B", "789C", "*0#D"]. Rows must
// have the same length and labels must be unique.
func Parse(rows []string) (Keymap, error) {
	if len(rows) == 0 {
		return nil, fmt.Errorf("keymap has no rows")
	}
	seen := map[rune][2]int{}
	km := make(Keymap, len(rows))
	for r, s := range rows {
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("keymap row %d is not UTF-8", r)
		}
		km[r] = []rune(s)
		if len(km[r]) != len(km[0]) {
			return nil, fmt.Errorf("keymap row %d has %d keys, row 0 has %d", r, len(km[r]), len(km[0]))
		}
		for c, k := range km[r] {
			if k < 0x21 || k == 0x7f {
				return nil, fmt.Errorf("keymap row %d column %d: %q is not a printable label", r, c, k)
			}
			if at, dup := seen[k]; dup {
				return nil, fmt.Errorf("keymap key %q is at row %d column %d and row %d column %d", k, at[0], at[1], r, c)
			}
			seen[k] = [2]int{r, c}
		}
	}
	if len(km[0]) == 0 {
		return nil, fmt.Errorf("keymap has no columns")
	}
	return km, nil
}

// Size returns the number of rows and columns.
func (km Keymap) Size() (rows, cols int) {
	if len(km) == 0 {
		return 0, 0
	}
	return len(km), len(km[0])
}

// Has reports whether key is on the keypad.
func (km Keymap) Has(key rune) bool {
	for _, row := range km {
		for _, k := range row {
			if k == key {
				return true
			}
		}
	}
	return false
}

// String returns the keymap in the profile form, "123A/456B/789C/*0#D".
func (km Keymap) String() string {
	rows := make([]string, len(km))
	for i, r := range km {
		rows[i] = string(r)
	}
	return strings.Join(rows, "/")
}

// Binding ties a function to a key: pressed (Hold false) or held until it
// auto-repeats (Hold true).
type Binding struct {
	Key  rune
	Hold bool
}

// ParseBinding parses "#" (press) or "hold:*" (hold); "" is no binding.
func ParseBinding(s string) (Binding, error) {
	if s == "" {
		return Binding{}, nil
	}
	b := Binding{}
	if rest, ok := strings.CutPrefix(s, "hold:"); ok {
		b.Hold, s = true, rest
	}
	r, size := utf8.DecodeRuneInString(s)
	if size == 0 || size != len(s) || r == utf8.RuneError {
		return Binding{}, fmt.Errorf("key binding %q: want one key label, optionally after \"hold:\"", s)
	}
	if r < 0x21 || r == 0x7f {
		return Binding{}, fmt.Errorf("key binding %q: %q is not a printable key label", s, r)
	}
	b.Key = r
	return b, nil
}

func (b Binding) String() string {
	switch {
	case b.Key == 0:
		return ""
	case b.Hold:
		return "hold:" + string(b.Key)
	}
	return string(b.Key)
}

// Keys binds the text-entry functions to keypad keys. A zero Binding
// leaves the function unbound.
type Keys struct {
	Case       Binding // cycle abc / ABC / 123
	Send       Binding // send the text
	Delete     Binding // delete the last character (repeats while held)
	ScrollUp   Binding // scroll the conversation (repeats while held)
	ScrollDown Binding
}

// Keys4x4 is the default binding for a 4x4 keypad: * case, # send,
// D delete, A/B scroll up/down.
func Keys4x4() Keys {
	return Keys{Case: Binding{Key: '*'}, Send: Binding{Key: '#'}, Delete: Binding{Key: 'D'},
		ScrollUp: Binding{Key: 'A'}, ScrollDown: Binding{Key: 'B'}}
}

// Keys3x4 is the default binding for a 3x4 keypad: * case, holding *
// deletes, # send; no scrolling.
func Keys3x4() Keys {
	return Keys{Case: Binding{Key: '*'}, Send: Binding{Key: '#'}, Delete: Binding{Key: '*', Hold: true}}
}
