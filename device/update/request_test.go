package update

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A request file is refused with the field named when it is not what
// the worker writes; none at all is no error.
func TestParseRequestRefuses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"version":"v1.1.0","update_id":"r-1.1","x":1}`, `unknown field "x"`},
		{`{"version":"v1.1.0"} {}`, "more than one JSON value"},
		{`{"update_id":"r-1.1"}`, "version"},
		{`{"version":"v1.1.0","update_id":"` + strings.Repeat("x", MaxUpdateIDBytes+1) + `"}`, "update_id: want at most 128 bytes"},
		{strings.Repeat(" ", MaxRequestBytes+1), "more than 1024"},
	} {
		if _, err := ParseRequest([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60q: %v, want an error saying %q", c.in, err, c.want)
		}
	}
	dir := t.TempDir()
	if r, err := ReadRequest(dir); r != nil || err != nil {
		t.Errorf("no file: %+v, %v; want nil, nil", r, err)
	}
	if err := os.WriteFile(filepath.Join(dir, RequestFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRequest(dir); err == nil || !strings.Contains(err.Error(), RequestFile) {
		t.Errorf("a torn file: %v, want an error naming it", err)
	}
	if id := (*Request)(nil).IDFor("v1"); id != "" {
		t.Errorf("no request names %q", id)
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"version":"v1.1.0","update_id":"r-1.1"}`))
	f.Add([]byte(`{"version":"v1.1.0"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRequest(data)
		if err != nil {
			return
		}
		again, err := ParseRequest(r.Marshal())
		if err != nil {
			t.Fatalf("%s: %v", r.Marshal(), err)
		}
		if !bytes.Equal(again.Marshal(), r.Marshal()) {
			t.Fatalf("round trip changed:\n%s\n%s", r.Marshal(), again.Marshal())
		}
	})
}
