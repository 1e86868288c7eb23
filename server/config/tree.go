package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// kind is a JSON value's type.
type kind int

const (
	kNull kind = iota
	kBool
	kNumber
	kString
	kArray
	kObject
)

func (k kind) String() string {
	switch k {
	case kBool:
		return "boolean"
	case kNumber:
		return "number"
	case kString:
		return "string"
	case kArray:
		return "array"
	case kObject:
		return "object"
	}
	return "null"
}

// node is a decoded JSON value that keeps object keys in order and notes
// keys given more than once.
type node struct {
	kind  kind
	b     bool
	num   json.Number
	str   string
	elems []*node // array
	keys  []string
	vals  []*node  // object, first occurrence of each key
	dups  []string // object keys given more than once
}

// decodeTree decodes data, which must hold exactly one JSON value.
func decodeTree(data []byte) (*node, *Error) {
	// encoding/json's Decoder.Token reports offsets relative to its buffer,
	// so find syntax errors (with exact positions) first.
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, syntaxError(data, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	n, err := readValue(dec)
	if err != nil {
		return nil, &Error{Msg: "invalid JSON: " + err.Error(), Err: err}
	}
	return n, nil
}

func readValue(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: kNull}, nil
	case bool:
		return &node{kind: kBool, b: t}, nil
	case json.Number:
		return &node{kind: kNumber, num: t}, nil
	case string:
		return &node{kind: kString, str: t}, nil
	case json.Delim:
		switch t {
		case '[':
			n := &node{kind: kArray}
			for dec.More() {
				v, err := readValue(dec)
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, v)
			}
			return n, closeDelim(dec, ']')
		case '{':
			n := &node{kind: kObject}
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
				v, err := readValue(dec)
				if err != nil {
					return nil, err
				}
				if seen[key] {
					n.dups = append(n.dups, key)
					continue
				}
				seen[key] = true
				n.keys = append(n.keys, key)
				n.vals = append(n.vals, v)
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
