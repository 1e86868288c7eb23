// Package strictjson parses a JSON document into a tree for strict
// decoders (server/config, boards): object keys stay in the order given,
// a key given twice is noted (not silently overwritten), numbers stay as
// written, and a syntax error says where it is (line and column).
//
// What a field means, and which fields exist, is the caller's business:
// it walks the tree and reports problems by path.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Kind is a JSON value's type.
type Kind uint8

// Kinds of values.
const (
	Null Kind = iota
	Bool
	Number
	String
	Array
	Object
)

func (k Kind) String() string {
	switch k {
	case Bool:
		return "boolean"
	case Number:
		return "number"
	case String:
		return "string"
	case Array:
		return "array"
	case Object:
		return "object"
	}
	return "null"
}

// Node is a parsed JSON value.
type Node struct {
	Kind  Kind
	Bool  bool
	Num   json.Number
	Str   string
	Elems []*Node // Array
	// Object: keys in order (first occurrence of each), their values, and
	// the keys given more than once (in the order their repeats appear).
	Keys []string
	Vals []*Node
	Dups []string
}

// MaxDepth bounds nesting.
const MaxDepth = 64

// SyntaxError is a document that is not one JSON value.
type SyntaxError struct {
	Line, Column int    // 1-based, of the offending character (columns count runes)
	Msg          string // encoding/json's message
	EOF          bool   // the document ended early (or is empty)
	Trailing     bool   // more data after the value
	Err          error  // encoding/json's error
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

func (e *SyntaxError) Unwrap() error { return e.Err }

// Parse parses data, which must hold exactly one JSON value. A syntax
// error is a *SyntaxError.
func Parse(data []byte) (*Node, error) {
	// encoding/json's Decoder.Token reports offsets relative to its
	// buffer, so find syntax errors (with exact positions) first.
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, syntaxError(data, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	n, err := readValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	return n, nil
}

func syntaxError(data []byte, err error) *SyntaxError {
	pos := len(data)
	msg := strings.TrimPrefix(err.Error(), "json: ")
	var syn *json.SyntaxError
	eof := strings.HasPrefix(msg, "unexpected end")
	if errors.As(err, &syn) && !eof && syn.Offset > 0 {
		pos = int(syn.Offset) - 1 // Offset counts the offending byte
	}
	pos = min(max(pos, 0), len(data))
	line := 1 + bytes.Count(data[:pos], []byte{'\n'})
	start := bytes.LastIndexByte(data[:pos], '\n') + 1
	col := 1 + utf8.RuneCount(data[start:pos])
	return &SyntaxError{Line: line, Column: col, Msg: msg, EOF: eof,
		Trailing: strings.Contains(msg, "after top-level value"), Err: err}
}

func readValue(dec *json.Decoder, depth int) (*Node, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &Node{Kind: Null}, nil
	case bool:
		return &Node{Kind: Bool, Bool: t}, nil
	case json.Number:
		return &Node{Kind: Number, Num: t}, nil
	case string:
		return &Node{Kind: String, Str: t}, nil
	case json.Delim:
		switch t {
		case '[':
			n := &Node{Kind: Array}
			for dec.More() {
				v, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.Elems = append(n.Elems, v)
			}
			return n, closeDelim(dec, ']')
		case '{':
			n := &Node{Kind: Object}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is %v", kt)
				}
				v, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if seen[key] {
					n.Dups = append(n.Dups, key)
					continue
				}
				seen[key] = true
				n.Keys = append(n.Keys, key)
				n.Vals = append(n.Vals, v)
			}
			return n, closeDelim(dec, '}')
		}
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

func closeDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return errors.New("unbalanced " + want.String())
	}
	return nil
}
