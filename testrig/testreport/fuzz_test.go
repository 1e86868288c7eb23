package main

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzRead: any stream is read without a panic; every line that is not
// an event is printed unchanged, and a stream that starts a package and
// never finishes it fails.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"Action":"start","Package":"p"}` + "\n" + `{"Action":"run","Package":"p","Test":"T"}` + "\n" +
		`{"Action":"output","Package":"p","Test":"T","Output":"    x_test.go:3: no tool\n"}` + "\n" +
		`{"Action":"skip","Package":"p","Test":"T"}` + "\n" + `{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}` + "\n" +
		`{"Action":"pass","Package":"p"}` + "\n"))
	f.Add([]byte(`{"Action":"start","Package":"p"}` + "\n" + `{"Action":"fail","Package":"p","Test":"T"}` + "\n"))
	f.Add([]byte("# p\nx.go:1: bad\n{not json\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		r := newReport(&out)
		err := r.read(bytes.NewReader(in))
		r.summary()
		if err != nil && !r.failed {
			t.Fatalf("error %v without failing", err)
		}
		for _, l := range strings.Split(string(in), "\n") {
			if l != "" && l[0] != '{' && !strings.Contains(l, "\r") && len(l) < 60000 && !strings.Contains(out.String(), l) {
				t.Fatalf("line %q not passed through:\n%s", l, out.String())
			}
		}
	})
}
