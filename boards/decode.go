package boards

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// FieldError is a problem with one field of a profile: its file, its path
// ("display.address", "keypad.rows[2]") and what is wrong.
type FieldError struct {
	File string
	Path string
	Msg  string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// node is a parsed JSON value that keeps object keys in order (so
// duplicates can be refused) and numbers as written.
type node struct {
	kind   byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	keys   []string
	vals   []*node
	str    string
	num    json.Number
	b      bool
	offset int64
}

func (n *node) what() string {
	switch n.kind {
	case 'o':
		return "an object"
	case 'a':
		return "an array"
	case 's':
		return "a string"
	case 'n':
		return "a number"
	case 'b':
		return "a boolean"
	}
	return "null"
}

// decodeStrict decodes data into v (a pointer to a struct) refusing unknown
// and duplicate keys and mistyped values, with the field path in the error.
// Keys match the json tag; camelCase spellings of snake_case tags are
// accepted too.
func decodeStrict(file string, data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	root, err := parseNode(dec)
	if err != nil {
		return syntaxError(file, data, dec, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &FieldError{File: file, Msg: "unexpected data after the top-level object"}
	}
	return bind(file, "", root, reflect.ValueOf(v).Elem())
}

func syntaxError(file string, data []byte, dec *json.Decoder, err error) error {
	off := dec.InputOffset()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = se.Offset
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &FieldError{File: file, Msg: "unexpected end of JSON"}
	}
	line, col := 1, 1
	for _, c := range data[:min(int(off), len(data))] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return &FieldError{File: file, Msg: fmt.Sprintf("line %d, column %d: %s", line, col, msg)}
}

const maxDepth = 32

func parseNode(dec *json.Decoder) (*node, error) { return parseDepth(dec, 0) }

func parseDepth(dec *json.Decoder, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, errors.New("nested too deep")
	}
	off := dec.InputOffset()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	n := &node{offset: off}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n.kind = 'o'
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string)
				v, err := parseDepth(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, key)
				n.vals = append(n.vals, v)
			}
		case '[':
			n.kind = 'a'
			for dec.More() {
				v, err := parseDepth(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.vals = append(n.vals, v)
			}
		}
		if _, err := dec.Token(); err != nil { // closing delimiter
			return nil, err
		}
	case string:
		n.kind, n.str = 's', t
	case json.Number:
		n.kind, n.num = 'n', t
	case bool:
		n.kind, n.b = 'b', t
	case nil:
		n.kind = 'z'
	}
	return n, nil
}

// normKey folds "scroll_up", "scrollUp" and "ScrollUp" together.
func normKey(s string) string {
	return strings.ToLower(strings.ReplaceAll(s, "_", ""))
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func bind(file, path string, n *node, v reflect.Value) error {
	fail := func(format string, args ...any) error {
		return &FieldError{File: file, Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	if v.Kind() == reflect.Pointer {
		if n.kind == 'z' {
			v.SetZero()
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return bind(file, path, n, v.Elem())
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		raw, err := n.raw()
		if err != nil {
			return fail("%v", err)
		}
		if err := v.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
			return fail("%v", err)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		if n.kind != 'o' {
			return fail("want an object, got %s", n.what())
		}
		fields := map[string]int{}
		var names []string
		t := v.Type()
		for i := range t.NumField() {
			tag := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			fields[normKey(tag)] = i
			names = append(names, tag)
		}
		seen := map[string]string{}
		for i, key := range n.keys {
			p := join(path, key)
			idx, ok := fields[normKey(key)]
			if !ok {
				sort.Strings(names)
				return &FieldError{File: file, Path: p, Msg: "unknown field (known: " + strings.Join(names, ", ") + ")"}
			}
			if prev, dup := seen[normKey(key)]; dup {
				return &FieldError{File: file, Path: p, Msg: fmt.Sprintf("given twice (also as %q)", prev)}
			}
			seen[normKey(key)] = key
			if err := bind(file, p, n.vals[i], v.Field(idx)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if n.kind == 'z' {
			v.SetZero()
			return nil
		}
		if n.kind != 'a' {
			return fail("want an array, got %s", n.what())
		}
		s := reflect.MakeSlice(v.Type(), len(n.vals), len(n.vals))
		for i, e := range n.vals {
			if err := bind(file, fmt.Sprintf("%s[%d]", path, i), e, s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		if n.kind != 'o' {
			return fail("want an object, got %s", n.what())
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.keys))
		for i, key := range n.keys {
			kv := reflect.ValueOf(key).Convert(v.Type().Key())
			if m.MapIndex(kv).IsValid() {
				return &FieldError{File: file, Path: join(path, key), Msg: "given twice"}
			}
			ev := reflect.New(v.Type().Elem()).Elem()
			if err := bind(file, join(path, key), n.vals[i], ev); err != nil {
				return err
			}
			m.SetMapIndex(kv, ev)
		}
		v.Set(m)
		return nil
	case reflect.String:
		if n.kind != 's' {
			return fail("want a string, got %s", n.what())
		}
		v.SetString(n.str)
		return nil
	case reflect.Bool:
		if n.kind != 'b' {
			return fail("want true or false, got %s", n.what())
		}
		v.SetBool(n.b)
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.kind != 'n' {
			return fail("want an integer, got %s", n.what())
		}
		i, err := strconv.ParseInt(string(n.num), 10, 64)
		if err != nil || v.OverflowInt(i) {
			return fail("want an integer, got %s", n.num)
		}
		v.SetInt(i)
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.kind != 'n' {
			return fail("want a non-negative integer, got %s", n.what())
		}
		u, err := strconv.ParseUint(string(n.num), 10, 64)
		if err != nil || v.OverflowUint(u) {
			return fail("want an integer from 0 to %d, got %s", uint64(1)<<(v.Type().Bits())-1, n.num)
		}
		v.SetUint(u)
		return nil
	case reflect.Float32, reflect.Float64:
		if n.kind != 'n' {
			return fail("want a number, got %s", n.what())
		}
		f, err := n.num.Float64()
		if err != nil || math.IsInf(f, 0) {
			return fail("want a number, got %s", n.num)
		}
		v.SetFloat(f)
		return nil
	}
	return fail("cannot decode into %s", v.Type())
}

// raw re-encodes a scalar node for a json.Unmarshaler.
func (n *node) raw() ([]byte, error) {
	switch n.kind {
	case 's':
		return json.Marshal(n.str)
	case 'n':
		return []byte(n.num), nil
	case 'b':
		return json.Marshal(n.b)
	case 'z':
		return []byte("null"), nil
	}
	return nil, fmt.Errorf("want a single value, got %s", n.what())
}
