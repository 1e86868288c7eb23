package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"termlink/internal/strictjson"
)

// CheckContentType returns why a write's Content-Type is not JSON, or "".
func CheckContentType(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "a " + r.Method + " to the API must say Content-Type: application/json (it has none)"
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fmt.Sprintf("a %s to the API must say Content-Type: application/json, not %q", r.Method, TruncateUTF8(ct, 100))
	}
	if cs, has := params["charset"]; has && !strings.EqualFold(cs, "utf-8") {
		return fmt.Sprintf("a JSON body is UTF-8: charset %q is not taken", TruncateUTF8(cs, 40))
	}
	return ""
}

// StrictBody reads r's body (at most limit bytes), checks it with
// CheckBody, and puts it back for the route; it answers 413 or 400
// itself and returns false when the body is refused. An empty body is
// left to the route (some take none).
func StrictBody(w http.ResponseWriter, r *http.Request, limit int64) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", limit))
			return false
		}
		WriteError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return false
	}
	if err := CheckBody(body); err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return true
}

// Decode is how a route reads its JSON body, the API's one body policy:
// at most limit bytes, CheckBody's rules, an object with no field v does
// not have. An empty body leaves v as it is (a route that needs a body
// checks its fields). The error is the 400's message; a body over limit
// is ErrTooLarge's.
func Decode(r *http.Request, limit int64, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("%w: the body is longer than %d bytes", ErrTooLarge, limit)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := CheckBody(b); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the body is not the JSON object expected: %v", err)
	}
	return nil
}

// ErrTooLarge is wrapped by Decode's error for a body over its limit.
var ErrTooLarge = errors.New("body too large")

// DecodeError answers a Decode error: 413 for ErrTooLarge, else 400.
func DecodeError(w http.ResponseWriter, err error) {
	status := http.StatusBadRequest
	if errors.Is(err, ErrTooLarge) {
		status = http.StatusRequestEntityTooLarge
	}
	WriteError(w, status, err.Error())
}

// CheckBody is the API's one body policy, the device wire's
// (link.Decode): valid UTF-8 (no byte quietly replaced by U+FFFD), one
// JSON value, and no key twice in any object (encoding/json would keep
// the last one, so two readers could see different bodies). A blank body
// passes: the route says whether it needs one.
func CheckBody(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if !utf8.Valid(body) {
		return fmt.Errorf("the body is not valid UTF-8 (first bad byte at offset %d)", firstInvalidUTF8(body))
	}
	root, err := strictjson.Parse(body)
	var se *strictjson.SyntaxError
	switch {
	case errors.As(err, &se) && se.Trailing:
		return fmt.Errorf("the body must be one JSON object; something follows it (line %d, column %d)", se.Line, se.Column)
	case err != nil:
		return fmt.Errorf("the body must be a JSON object: %v", err) // the API's bodies are all objects
	}
	if path, key := duplicateKey(root, "$"); path == "$" {
		return fmt.Errorf("the body gives key %q twice: each key may appear once", TruncateUTF8(key, 100))
	} else if path != "" {
		return fmt.Errorf("the body gives key %q twice in %s: each key may appear once", TruncateUTF8(key, 100), TruncateUTF8(strings.TrimPrefix(path, "$."), 200))
	}
	return nil
}

// duplicateKey finds the first object under n (depth first) that gives a
// key twice: its path ($, $.a, $.a[2]) and the key.
func duplicateKey(n *strictjson.Node, path string) (string, string) {
	switch n.Kind {
	case strictjson.Object:
		if len(n.Dups) > 0 {
			return path, n.Dups[0]
		}
		for i, k := range n.Keys {
			if p, key := duplicateKey(n.Vals[i], path+"."+k); p != "" {
				return p, key
			}
		}
	case strictjson.Array:
		for i, e := range n.Elems {
			if p, key := duplicateKey(e, path+"["+strconv.Itoa(i)+"]"); p != "" {
				return p, key
			}
		}
	}
	return "", ""
}

// firstInvalidUTF8 is the offset of b's first byte that is not UTF-8.
func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}
