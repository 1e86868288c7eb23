package boards

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"termlink/internal/strictjson"
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

// what names a value's type for messages: "an object", "a string".
func what(n *strictjson.Node) string {
	switch n.Kind {
	case strictjson.Object:
		return "an object"
	case strictjson.Array:
		return "an array"
	case strictjson.String:
		return "a string"
	case strictjson.Number:
		return "a number"
	case strictjson.Bool:
		return "a boolean"
	}
	return "null"
}

// decodeStrict decodes data into v (a pointer to a struct) refusing unknown
// and duplicate keys and mistyped values, with the field path in the error.
// Keys match the json tag; camelCase spellings of snake_case tags are
// accepted too. The JSON tree is strictjson's, as for the server's config.
func decodeStrict(file string, data []byte, v any) error {
	root, err := strictjson.Parse(data)
	if err != nil {
		var se *strictjson.SyntaxError
		switch {
		case errors.As(err, &se) && se.EOF:
			return &FieldError{File: file, Msg: "unexpected end of JSON"}
		case errors.As(err, &se) && se.Trailing:
			return &FieldError{File: file, Msg: "unexpected data after the top-level object"}
		}
		return &FieldError{File: file, Msg: err.Error()}
	}
	return bind(file, "", root, reflect.ValueOf(v).Elem())
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

func bind(file, path string, n *strictjson.Node, v reflect.Value) error {
	fail := func(format string, args ...any) error {
		return &FieldError{File: file, Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	if v.Kind() == reflect.Pointer {
		if n.Kind == strictjson.Null {
			v.SetZero()
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return bind(file, path, n, v.Elem())
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		raw, err := rawScalar(n)
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
		if n.Kind != strictjson.Object {
			return fail("want an object, got %s", what(n))
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
		if len(n.Dups) > 0 {
			return &FieldError{File: file, Path: join(path, n.Dups[0]), Msg: "given twice"}
		}
		seen := map[string]string{}
		for i, key := range n.Keys {
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
			if err := bind(file, p, n.Vals[i], v.Field(idx)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if n.Kind == strictjson.Null {
			v.SetZero()
			return nil
		}
		if n.Kind != strictjson.Array {
			return fail("want an array, got %s", what(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Elems), len(n.Elems))
		for i, e := range n.Elems {
			if err := bind(file, fmt.Sprintf("%s[%d]", path, i), e, s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		if n.Kind != strictjson.Object {
			return fail("want an object, got %s", what(n))
		}
		if len(n.Dups) > 0 {
			return &FieldError{File: file, Path: join(path, n.Dups[0]), Msg: "given twice"}
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Keys))
		for i, key := range n.Keys {
			kv := reflect.ValueOf(key).Convert(v.Type().Key())
			if m.MapIndex(kv).IsValid() {
				return &FieldError{File: file, Path: join(path, key), Msg: "given twice"}
			}
			ev := reflect.New(v.Type().Elem()).Elem()
			if err := bind(file, join(path, key), n.Vals[i], ev); err != nil {
				return err
			}
			m.SetMapIndex(kv, ev)
		}
		v.Set(m)
		return nil
	case reflect.String:
		if n.Kind != strictjson.String {
			return fail("want a string, got %s", what(n))
		}
		v.SetString(n.Str)
		return nil
	case reflect.Bool:
		if n.Kind != strictjson.Bool {
			return fail("want true or false, got %s", what(n))
		}
		v.SetBool(n.Bool)
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.Kind != strictjson.Number {
			return fail("want an integer, got %s", what(n))
		}
		i, err := strconv.ParseInt(string(n.Num), 10, 64)
		if err != nil || v.OverflowInt(i) {
			return fail("want an integer, got %s", n.Num)
		}
		v.SetInt(i)
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != strictjson.Number {
			return fail("want a non-negative integer, got %s", what(n))
		}
		u, err := strconv.ParseUint(string(n.Num), 10, 64)
		if err != nil || v.OverflowUint(u) {
			return fail("want an integer from 0 to %d, got %s", uint64(1)<<(v.Type().Bits())-1, n.Num)
		}
		v.SetUint(u)
		return nil
	case reflect.Float32, reflect.Float64:
		if n.Kind != strictjson.Number {
			return fail("want a number, got %s", what(n))
		}
		f, err := n.Num.Float64()
		if err != nil || math.IsInf(f, 0) {
			return fail("want a number, got %s", n.Num)
		}
		v.SetFloat(f)
		return nil
	}
	return fail("cannot decode into %s", v.Type())
}

// rawScalar re-encodes a scalar for a json.Unmarshaler.
func rawScalar(n *strictjson.Node) ([]byte, error) {
	switch n.Kind {
	case strictjson.String:
		return json.Marshal(n.Str)
	case strictjson.Number:
		return []byte(n.Num), nil
	case strictjson.Bool:
		return json.Marshal(n.Bool)
	case strictjson.Null:
		return []byte("null"), nil
	}
	return nil, fmt.Errorf("want a single value, got %s", what(n))
}
