// Package console is termserver's web console: the operator's view of a
// kiosk fleet (devices online and offline, their tags and versions, a
// live event stream, one device's LCD mirror, conversation, pending
// notices and running work, its update and pushed settings), a form to
// send notices, and the fleet operations: rollouts (started, followed
// device by device, paused, resumed, aborted), a device's own settings
// document, its log and self-test.
//
// It is plain HTML, CSS and JavaScript embedded in the binary: no build
// step, no CDN, nothing fetched from elsewhere, so it works offline. The
// files hold no data; the page asks the operator for an admin token, keeps
// it in the browser's sessionStorage only, and sends it as
// `Authorization: Bearer` on every call to the JSON API (/api/...). The
// live stream is read with fetch() from
// /api/channels/{id}/events/stream (Server-Sent Events), because
// EventSource cannot send that header and tokens never go into URLs.
//
// GET /api/whoami tells the page the token's role: a viewer gets read-only
// pages (no control that would send, withdraw, cancel, approve, start a
// rollout or change settings). A
// device's HD44780 glass is drawn on a canvas, dot by dot, with its ROM's
// 5x8 patterns from glyphs.js, which go generate makes from glyphs.go and
// display.ROM (TestGlyphsJSUpToDate keeps them equal).
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// Files are the console's embedded files (index.html at the root).
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	return sub
}

// contentTypes are the console's file types, fixed here rather than taken
// from the host's mime tables (which differ between systems).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
	".txt":  "text/plain; charset=utf-8",
}

// Handler serves the console: index.html at "/" and the other files
// under "/console/". Any other path is 404. Register it for
// "GET /{$}" and "GET /console/".
func Handler() http.Handler {
	files := Files()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := ""
		switch p := r.URL.Path; {
		case p == "/" || p == "/console/" || p == "/console":
			name = "index.html"
		case strings.HasPrefix(p, "/console/"):
			name = strings.TrimPrefix(path.Clean(p), "/console/")
		}
		if name == "" || !fs.ValidPath(name) {
			http.NotFound(w, r)
			return
		}
		data, err := fs.ReadFile(files, name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		ctype, ok := contentTypes[path.Ext(name)]
		if !ok {
			ctype = "application/octet-stream"
		}
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("X-Content-Type-Options", "nosniff")
		// The page may talk only to its own origin and load nothing from
		// elsewhere; it is never framed.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(data)
	})
}
