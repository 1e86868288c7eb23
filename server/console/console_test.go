package console_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"termlink/server/console"
	"termlink/server/servertest"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func TestHandlerServesFiles(t *testing.T) {
	h := console.Handler()
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script src="/console/app.js"`},
		{"/console/", "text/html; charset=utf-8", `id="login-form"`},
		{"/console/index.html", "text/html; charset=utf-8", `<html lang="en">`},
		{"/console/app.js", "text/javascript; charset=utf-8", "readSSE"},
		{"/console/style.css", "text/css; charset=utf-8", ".lcd"},
	} {
		resp := get(t, h, http.MethodGet, tc.path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: status %d, want 200", tc.path, resp.StatusCode)
			continue
		}
		if got := resp.Header.Get("Content-Type"); got != tc.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q, want nosniff", tc.path, got)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q does not keep the page to its own origin", tc.path, csp)
		}
		if !strings.Contains(string(body), tc.contains) {
			t.Errorf("GET %s: body lacks %q", tc.path, tc.contains)
		}
	}
	resp := get(t, h, http.MethodHead, "/console/app.js")
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || len(body) != 0 {
		t.Errorf("HEAD /console/app.js: status %d, %d body bytes; want 200 and none", resp.StatusCode, len(body))
	}
}

func TestHandlerRefuses(t *testing.T) {
	h := console.Handler()
	for _, path := range []string{"/console/missing.js", "/other", "/console/../console.go", "/console/%2e%2e/console.go", "/console/static/app.js"} {
		if resp := get(t, h, http.MethodGet, path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", path, resp.StatusCode)
		}
	}
	resp := get(t, h, http.MethodPost, "/")
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: status %d Allow %q, want 405 and GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// The console works offline and loads nothing from elsewhere: no file may
// name another origin.
func TestNoExternalURLs(t *testing.T) {
	external := regexp.MustCompile(`(?i)https?://|(src|href|action)\s*=\s*["']?//|url\(\s*["']?//|@import`)
	n := 0
	err := fs.WalkDir(console.Files(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		data, err := fs.ReadFile(console.Files(), name)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if m := external.FindString(line); m != "" {
				t.Errorf("%s:%d names another origin (%q): %s", name, i+1, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Fatalf("walked %d embedded files, want index.html, app.js and style.css at least", n)
	}
}

// Every element app.js looks up by id exists in index.html, and every
// file index.html loads is embedded: a renamed id or file fails here, not
// in an operator's browser.
func TestPageIsConsistent(t *testing.T) {
	html, err := fs.ReadFile(console.Files(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	js, err := fs.ReadFile(console.Files(), "app.js")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bid="([^"]+)"`).FindAllStringSubmatch(string(html), -1) {
		if ids[m[1]] {
			t.Errorf("index.html: id %q is used twice", m[1])
		}
		ids[m[1]] = true
	}
	used := regexp.MustCompile(`\$\('([^']+)'\)`).FindAllStringSubmatch(string(js), -1)
	if len(used) < 10 {
		t.Fatalf("found %d $('id') lookups in app.js; the pattern no longer matches the code", len(used))
	}
	for _, m := range used {
		if !ids[m[1]] {
			t.Errorf("app.js looks up id %q, which index.html does not have", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`(?:src|href)="/console/([^"]+)"`).FindAllStringSubmatch(string(html), -1) {
		if _, err := fs.Stat(console.Files(), m[1]); err != nil {
			t.Errorf("index.html loads /console/%s, which is not embedded", m[1])
		}
	}
	// Labels point at real controls.
	for _, m := range regexp.MustCompile(`<label for="([^"]+)"`).FindAllStringSubmatch(string(html), -1) {
		if !ids[m[1]] {
			t.Errorf("index.html: <label for=%q> names no element", m[1])
		}
	}
}

// termserver serves the console at / and /console/, without a token: the
// files hold no data.
func TestServedByTermserver(t *testing.T) {
	srv := servertest.Start(t, nil)
	for _, path := range []string{"/", "/console/app.js", "/console/style.css"} {
		resp, err := http.Get("http://" + srv.Addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("termserver GET %s: status %d, want 200", path, resp.StatusCode)
		}
	}
	resp, err := http.Get("http://" + srv.Addr + "/no-such-page")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("termserver GET /no-such-page: status %d, want 404", resp.StatusCode)
	}
}
