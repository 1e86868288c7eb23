package harness

import "strings"

// keyBytes maps the key names an agent may give as a command's whole
// keystrokes to the bytes a terminal sends for that key. The names are
// tmux's; C-a .. C-z are all accepted (the spec lists C-c, C-d, C-z, C-l).
var keyBytes = func() map[string]string {
	m := map[string]string{
		"Enter":  "\r",
		"Escape": "\x1b",
		"Tab":    "\t",
		"BSpace": "\x7f",
		"Up":     "\x1b[A",
		"Down":   "\x1b[B",
		"Right":  "\x1b[C",
		"Left":   "\x1b[D",
	}
	for c := 'a'; c <= 'z'; c++ {
		m["C-"+string(c)] = string(c - 'a' + 1)
	}
	return m
}()

// IsKey reports whether keystrokes, taken whole, is the name of a special
// key (Enter, Escape, Tab, BSpace, Up, Down, Left, Right, C-a .. C-z)
// rather than text to type.
func IsKey(keystrokes string) bool {
	_, ok := keyBytes[keystrokes]
	return ok
}

// terminalBytes returns what a terminal sends for keystrokes: the key's
// bytes for a key name, else the text with each "\n" sent as "\r", as the
// Enter key does.
func terminalBytes(keystrokes string) []byte {
	if b, ok := keyBytes[keystrokes]; ok {
		return []byte(b)
	}
	return []byte(strings.ReplaceAll(keystrokes, "\n", "\r"))
}
