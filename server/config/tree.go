package config

import (
	"encoding/json"
	"errors"

	"termlink/internal/strictjson"
)

// kind is a JSON value's type.
type kind = strictjson.Kind

const (
	kNull   = strictjson.Null
	kBool   = strictjson.Bool
	kNumber = strictjson.Number
	kString = strictjson.String
	kArray  = strictjson.Array
	kObject = strictjson.Object
)

// node is a decoded JSON value that keeps object keys in order and notes
// keys given more than once: strictjson's tree (shared with boards), in
// the field names this package's walker uses.
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
	root, err := strictjson.Parse(data)
	if err != nil {
		var se *strictjson.SyntaxError
		if errors.As(err, &se) {
			return nil, syntaxError(data, se.Err)
		}
		return nil, &Error{Msg: err.Error(), Err: errors.Unwrap(err)}
	}
	return fromTree(root), nil
}

func fromTree(n *strictjson.Node) *node {
	out := &node{kind: n.Kind, b: n.Bool, num: n.Num, str: n.Str, keys: n.Keys, dups: n.Dups}
	for _, e := range n.Elems {
		out.elems = append(out.elems, fromTree(e))
	}
	for _, v := range n.Vals {
		out.vals = append(out.vals, fromTree(v))
	}
	return out
}
