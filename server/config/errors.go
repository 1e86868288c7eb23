package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is one problem in a config.
type Error struct {
	File   string // the file, when it came from Load
	Line   int    // 1-based line of a JSON syntax error; 0 otherwise
	Column int    // 1-based column (in characters) of a JSON syntax error
	Path   string // the key's path, e.g. "channels.terminal-dev.agent"; "" for the whole document
	Msg    string
	Err    error // underlying error, if any
}

// Error formats e as "[FILE: ]config: [PATH: ]MSG". A syntax error shows its
// position as "FILE:LINE:COL: config: ..." or "config: line L, column C: ...".
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
		}
		b.WriteString(": ")
	}
	b.WriteString("config: ")
	if e.File == "" && e.Line > 0 {
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// joinErrors sorts errs by message, drops repeats and joins them.
func joinErrors(errs []*Error) error {
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	out := make([]error, 0, len(errs))
	last := ""
	for i, e := range errs {
		s := e.Error()
		if i > 0 && s == last {
			continue
		}
		last = s
		out = append(out, e)
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

// syntaxError converts an encoding/json syntax error on data into an
// *Error with its line and column.
func syntaxError(data []byte, err error) *Error {
	pos := len(data)
	msg := err.Error()
	var syn *json.SyntaxError
	if errors.As(err, &syn) && !strings.HasPrefix(msg, "unexpected end") && syn.Offset > 0 {
		pos = int(syn.Offset) - 1 // Offset counts the offending byte
	}
	pos = min(max(pos, 0), len(data))
	line := 1 + bytes.Count(data[:pos], []byte{'\n'})
	start := bytes.LastIndexByte(data[:pos], '\n') + 1
	col := 1 + utf8.RuneCount(data[start:pos])
	return &Error{Line: line, Column: col, Msg: "invalid JSON: " + msg, Err: err}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// namePattern is nameRE's pattern, for messages.
const namePattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`

var plainSegRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// join appends a key to a path, quoting keys that would be ambiguous or
// unprintable.
func join(path, key string) string {
	if !plainSegRE.MatchString(key) {
		key = strconv.Quote(truncate(key))
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// truncate shortens s for a message.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// quote renders a user-supplied string for a message.
func quote(s string) string { return strconv.Quote(truncate(s)) }
