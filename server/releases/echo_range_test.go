package releases

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// An empty suffix range ("-0") is unsatisfiable (RFC 9110 14.1.3): 416
// with "Content-Range: bytes */SIZE", never a 206 with an invalid
// Content-Range; among other ranges it is left out. A stale If-Range
// still gets the whole binary.
func TestEmptySuffixRange(t *testing.T) {
	f := newFixture(t, nil)
	bin, m := f.binary("1.0.0", "linux/amd64", 1000)
	if r := f.upload(releasePath(m), m, bin, operatorSecret); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	get := func(hdr map[string]string) resp { return f.do("GET", releasePath(m)+"/binary", viewerSecret, hdr, nil) }
	for _, rg := range []string{"bytes=-0", "bytes=-00", "bytes= -0 ", "bytes=-0,-0", "bytes=-0,"} {
		r := get(map[string]string{"Range": rg})
		if r.status != http.StatusRequestedRangeNotSatisfiable || r.header.Get("Content-Range") != "bytes */"+strconv.Itoa(len(bin)) {
			t.Errorf("Range %q: %d, Content-Range %q (want 416, bytes */%d)", rg, r.status, r.header.Get("Content-Range"), len(bin))
		}
	}
	r := get(map[string]string{"Range": "bytes=-0,-10"})
	if r.status != http.StatusPartialContent || r.header.Get("Content-Range") != "bytes 990-999/1000" || string(r.body) != string(bin[990:]) {
		t.Errorf("Range -0,-10: %d, Content-Range %q, %d bytes", r.status, r.header.Get("Content-Range"), len(r.body))
	}
	r = get(map[string]string{"Range": "bytes=-10"})
	if r.status != http.StatusPartialContent || r.header.Get("Content-Range") != "bytes 990-999/1000" {
		t.Errorf("Range -10: %d, Content-Range %q", r.status, r.header.Get("Content-Range"))
	}
	r = get(map[string]string{"Range": "bytes=-0", "If-Range": `"stale"`})
	if r.status != http.StatusOK || len(r.body) != len(bin) {
		t.Errorf("Range -0 with a stale If-Range: %d, %d bytes (want 200 and the whole binary)", r.status, len(r.body))
	}
}

func TestSatisfiableRanges(t *testing.T) {
	for _, c := range []struct {
		h    string
		size int64
		want string
		ok   bool
	}{
		{"bytes=0-9", 100, "bytes=0-9", false},
		{"bytes=-5", 100, "bytes=-5", false},
		{"bytes=-0", 100, "bytes=100-", true},
		{"bytes=-5", 0, "bytes=0-", true},
		{"bytes=0-9,-0", 100, "bytes=0-9", true},
		{"items=-0", 100, "items=-0", false},
		{"", 100, "", false},
	} {
		got, ok := satisfiableRanges(c.h, c.size)
		if got != c.want || ok != c.ok {
			t.Errorf("satisfiableRanges(%q, %d) = %q %v, want %q %v", c.h, c.size, got, ok, c.want, c.ok)
		}
	}
}

// A bad path is refused with at most MaxEcho bytes of it: a 5,000
// character version or platform is not said back whole.
func TestBadPathEchoIsCut(t *testing.T) {
	f := newFixture(t, nil)
	long := strings.Repeat("v", 5000)
	for _, path := range []string{
		"/api/releases/" + long + "/linux/amd64/binary",
		"/api/releases/1.0.0/linux/" + long + "/binary",
		"/api/releases/1.0.0/linux/amd64/" + long,
	} {
		r := f.do("GET", path, viewerSecret, nil, nil)
		if r.status != http.StatusBadRequest || len(r.body) > 300 || !strings.Contains(r.errMsg(), "(5") {
			t.Errorf("GET %s…: %d, %d bytes: %s", path[:40], r.status, len(r.body), r.body)
		}
	}
	if _, _, err := ParsePath(long, "linux/amd64/binary", true); err == nil || !strings.Contains(err.Error(), "want 1 to 64") || len(err.Error()) > 250 {
		t.Errorf("ParsePath of a long version: %v", err)
	}
}
