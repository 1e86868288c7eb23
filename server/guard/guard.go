// Package guard is the operator guard of termserver's HTTP API
// (DESIGN.md "HTTP"; issue 13). Every route under
// /api/ except the device WebSocket is guarded: with admin tokens it takes
// "Authorization: Bearer <token>" (viewer: GET and HEAD; operator: also
// POST, PUT, PATCH, DELETE); without any it answers loopback clients only.
// The guard wraps the whole mux (Guard.Wrap), so a route added later is guarded
// without anyone remembering to; RequireRole demands more of one route.
//
// The guard also keeps a web page the operator's browser opens from
// acting as the operator (issue 22), with or without admin tokens:
//   - Host must name this server (checkHost): the address the request came
//     in on, localhost or a loopback address with that port, the listen
//     address's host name, or an entry of admin.allowedHosts (reverse
//     proxies); else 421. This stops DNS rebinding (evil.example resolved
//     to 127.0.0.1). It covers the operator routes and the console page,
//     not the device routes (a device reaches the server by whatever name
//     its network gives it: NAT, port forwards, mDNS), /healthz or
//     /metrics (probes and scrapers use service names).
//   - A browser's request must come from a page of this server
//     (checkOrigin): an Origin header must name the server as Host may,
//     and Sec-Fetch-Site "cross-site", or "same-site" without an Origin
//     proving the same origin, is refused with 403. Clients that are not
//     browsers (curl, termd, termrig) send neither header and pass. The
//     device routes take this check too, so another origin's page (or a
//     rebinding one) can neither open the device WebSocket as a device nor
//     ask for enrollment codes (an Origin no page sends, such as the
//     "file://" of some device libraries, passes there); gorilla's own
//     CheckOrigin is left open because this check runs first and says why.
//   - Writes (POST, PUT, PATCH, DELETE) must say Content-Type:
//     application/json (415): a page can send text/plain or a form to
//     another origin without asking, never JSON. No route takes another
//     type.
//     The one exception is a route the server names in RawBodyRoute (a
//     release upload): its writes say application/octet-stream, which a
//     page cannot send to another origin without a preflight either.
//   - One body policy (httpapi.StrictBody): every write's body is one JSON value
//     in valid UTF-8 with no key twice in any object, as the device wire
//     demands (link.Decode); else 400 naming the problem.
package guard

import (
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"termlink/server/config"
	"termlink/server/httpapi"
)

// NoTokensMsg is the refusal of a remote client when no admin tokens are
// configured.
const NoTokensMsg = "no admin tokens configured: the API answers loopback clients only"

// Options configure a Guard.
type Options struct {
	// Admin holds the admin tokens, allowedHosts and metricsRequireToken.
	Admin config.Admin
	// Listen is the config's listen address (its host names the server).
	Listen string
	// DeviceRoute reports whether a route is a device's (no admin token:
	// the device WebSocket and the enroll endpoints).
	DeviceRoute func(pattern string) bool
	// RawBodyRoute reports whether an operator route's writes take a
	// binary body (Content-Type application/octet-stream, bounded and
	// checked by the route itself: a release upload) instead of JSON.
	RawBodyRoute func(pattern string) bool
	// Bounds of a write's body as the guard reads it to check it: an
	// operator's largest (a broadcast notice listing many peers), and a
	// device's (enrollment's few fields; its routes refuse past their own).
	MaxOperatorBody, MaxDeviceBody int64
	Log                            *slog.Logger
}

// Guard is the operator guard.
type Guard struct{ opt Options }

// New returns the guard of opt.
func New(opt Options) *Guard {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.DeviceRoute == nil {
		opt.DeviceRoute = func(string) bool { return false }
	}
	if opt.RawBodyRoute == nil {
		opt.RawBodyRoute = func(string) bool { return false }
	}
	return &Guard{opt: opt}
}

// roleFor is what an HTTP method needs: reading takes a viewer, anything
// else an operator.
func roleFor(method string) config.Role {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return config.RoleViewer
	}
	return config.RoleOperator
}

// Wrap wraps mux with the checks each kind of route takes (routeKind),
// in this order: Host (421), Origin and Sec-Fetch-Site (403), the admin
// token (401, 403), then for writes the content type (415) and the body
// policy (400, 413), as the comment at the top of this file says.
func (s *Guard) Wrap(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind, pattern := s.routeKindOf(mux, r)
		if kind == operatorRoute || kind == consoleRoute {
			if msg := s.checkHost(r); msg != "" {
				httpapi.WriteError(w, http.StatusMisdirectedRequest, msg)
				return
			}
		}
		if kind == operatorRoute || kind == deviceRoute {
			if msg := s.checkOrigin(r, kind == deviceRoute); msg != "" {
				httpapi.WriteError(w, http.StatusForbidden, msg)
				return
			}
		}
		if kind == operatorRoute || (kind == metricsRoute && s.opt.Admin.MetricsRequireToken) {
			var ok bool
			if r, ok = s.authorize(w, r, roleFor(r.Method)); !ok {
				return
			}
		}
		if kind == operatorRoute && IsWrite(r.Method) && s.opt.RawBodyRoute(pattern) {
			if msg := checkBinaryType(r); msg != "" {
				httpapi.WriteError(w, http.StatusUnsupportedMediaType, msg)
				return
			}
		} else if (kind == operatorRoute || kind == deviceRoute) && IsWrite(r.Method) {
			if msg := httpapi.CheckContentType(r); msg != "" {
				httpapi.WriteError(w, http.StatusUnsupportedMediaType, msg)
				return
			}
			limit := s.opt.MaxOperatorBody
			if kind == deviceRoute {
				limit = s.opt.MaxDeviceBody
			}
			if !httpapi.StrictBody(w, r, limit) {
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// routeKind is which checks a route takes.
type routeKind int

const (
	openRoute     routeKind = iota // /healthz, unknown paths: no checks
	metricsRoute                   // /metrics: the token when admin.metricsRequireToken
	consoleRoute                   // the console's page and files: Host
	deviceRoute                    // the device WebSocket and enrollment: Origin; writes: JSON
	operatorRoute                  // the rest of /api/: Host, Origin, token; writes: JSON
)

func (s *Guard) routeKindOf(mux *http.ServeMux, r *http.Request) (routeKind, string) {
	switch p := r.URL.Path; {
	case p == "/metrics":
		return metricsRoute, ""
	case strings.HasPrefix(p, "/api/"):
		_, pattern := mux.Handler(r)
		if s.opt.DeviceRoute(pattern) { // the device WebSocket and enroll endpoints
			return deviceRoute, pattern
		}
		return operatorRoute, pattern
	case p == "/" || p == "/console" || strings.HasPrefix(p, "/console/"):
		return consoleRoute, ""
	}
	return openRoute, ""
}

// checkBinaryType returns why a binary write's Content-Type is not
// application/octet-stream, or "". Like JSON, that type is not one a page
// of another origin may send without a CORS preflight.
func checkBinaryType(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/octet-stream" {
		return fmt.Sprintf("a %s to %s takes a binary body: it must say Content-Type: application/octet-stream, not %q", r.Method, r.URL.Path, httpapi.TruncateUTF8(ct, 100))
	}
	return ""
}

// RequireRole wraps h so it answers only callers holding at least role
// (beyond what the guard asks for the method), e.g. a GET that shows what
// only operators may see.
func (s *Guard) RequireRole(role config.Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r, ok := s.authorize(w, r, role); ok {
			h(w, r)
		}
	}
}

// authorize checks r against the admin tokens (or, with none, that it
// comes from a loopback client), answering 401 or 403 itself when it may
// not pass; the request it returns carries the Operator.
func (s *Guard) authorize(w http.ResponseWriter, r *http.Request, need config.Role) (*http.Request, bool) {
	admin := s.opt.Admin
	if !admin.Enabled() {
		if !localClient(r) {
			httpapi.WriteError(w, http.StatusForbidden, NoTokensMsg)
			return r, false
		}
		return httpapi.WithOperator(r, httpapi.Operator{Name: "local", Role: config.RoleOperator}), true
	}
	secret, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="termlink"`)
		httpapi.WriteError(w, http.StatusUnauthorized, "authorization required: send Authorization: Bearer <admin token>")
		return r, false
	}
	tok, ok := admin.Lookup(secret)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="termlink", error="invalid_token"`)
		httpapi.WriteError(w, http.StatusUnauthorized, "the bearer token is not a configured admin token")
		return r, false
	}
	if tok.Role < need {
		httpapi.WriteError(w, http.StatusForbidden, "role "+tok.Role.String()+" may not "+r.Method+" "+r.URL.Path+": it needs role "+need.String())
		return r, false
	}
	return httpapi.WithOperator(r, httpapi.Operator{Name: tok.Name, Role: tok.Role}), true
}

// bearer extracts the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 7235).
func bearer(h string) (string, bool) { return httpapi.Bearer(h) }

// localClient reports whether r comes straight from a loopback address. A
// request forwarded by a proxy (Forwarded, X-Forwarded-For, X-Real-IP) is
// not local even when the proxy is.
func localClient(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"} {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	return isLoopbackAddr(r.RemoteAddr)
}

// isLoopbackAddr reports whether hostport ("ip:port") is in 127.0.0.0/8 or
// ::1 (an IPv4-mapped loopback address counts).
func isLoopbackAddr(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return ip.Unmap().IsLoopback()
}

// WarnOpen logs a warning when the server listens beyond loopback with
// no admin tokens: the operator API then refuses every remote client.
func (s *Guard) WarnOpen(addr net.Addr) {
	if s.opt.Admin.Enabled() {
		return
	}
	tcp, ok := addr.(*net.TCPAddr)
	if ok && tcp.IP.IsLoopback() {
		return
	}
	s.opt.Log.Warn("listening beyond loopback with no admin tokens: the operator API (/api/*) answers loopback clients only; "+
		"add an \"admin\" block with tokens to the config to use it remotely", "addr", addr.String())
}

// IsWrite reports whether a method writes (POST, PUT, PATCH, DELETE).
func IsWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// defaultPort is the port a Host or Origin without one means.
func defaultPort(scheme string) string {
	if scheme == "https" || scheme == "wss" {
		return "443"
	}
	return "80"
}

// splitHost splits a Host header (or an Origin's host) into a lower-case
// host (an IPv6 address without brackets, no trailing dot) and a port,
// defPort when it has none.
func splitHost(hostport, defPort string) (host, port string, ok bool) {
	host, port = hostport, defPort
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
		if port == "" || strings.Trim(port, "0123456789") != "" {
			return "", "", false
		}
	} else if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	} else if strings.Contains(hostport, ":") {
		return "", "", false
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return host, port, host != ""
}

// answersFor reports whether host:port names this server for a request
// that came in on r's connection: the connection's own address, localhost
// or a loopback address with its port, the config's listen host with its
// port, or an admin.allowedHosts entry.
func (s *Guard) answersFor(r *http.Request, host, port string) bool {
	for _, h := range s.opt.Admin.AllowedHosts {
		if h.Allows(host, port) {
			return true
		}
	}
	var local netip.AddrPort
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		local, _ = netip.ParseAddrPort(a.String())
	}
	localPort := ""
	if local.IsValid() {
		localPort = strconv.Itoa(int(local.Port()))
	} else if _, p, err := net.SplitHostPort(s.opt.Listen); err == nil {
		localPort = p
	}
	if port != localPort {
		return false
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		return ip.IsLoopback() || (local.IsValid() && ip == local.Addr().Unmap())
	}
	if host == "localhost" {
		return true
	}
	lh, _, err := net.SplitHostPort(s.opt.Listen)
	return err == nil && host == strings.ToLower(strings.TrimSuffix(lh, "."))
}

// requestScheme is how the client reached the server.
func requestScheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// checkHost returns why r's Host is not one this server answers for, or
// "" when it is.
func (s *Guard) checkHost(r *http.Request) string {
	host, port, ok := splitHost(r.Host, defaultPort(requestScheme(r)))
	switch {
	case r.Host == "":
		return "the request has no Host header: the operator API answers only requests that name it"
	case !ok:
		return fmt.Sprintf("Host %q is not a host[:port]", r.Host)
	case s.answersFor(r, host, port):
		return ""
	}
	return fmt.Sprintf("this server does not answer for Host %q (it answers for its listen address and localhost; "+
		"a name a reverse proxy or the operator uses goes in the config's admin.allowedHosts): refused against DNS rebinding", r.Host)
}

// checkOrigin returns why r comes from a page of another origin, or ""
// when it does not (a same-origin page, or no browser at all). On a device
// route an Origin no browser page sends (not http or https, nor "null":
// some embedded WebSocket libraries send "file://") passes, since a page
// cannot forge it.
func (s *Guard) checkOrigin(r *http.Request, device bool) string {
	const only = "this server takes requests from its own pages (the console) and from clients that are not browsers"
	site := r.Header.Get("Sec-Fetch-Site")
	origin := r.Header.Get("Origin")
	if strings.EqualFold(site, "cross-site") {
		return "cross-site request refused (Sec-Fetch-Site: cross-site): a page of another site sent it; " + only
	}
	if origin == "" {
		if strings.EqualFold(site, "same-site") {
			return "cross-origin request refused (Sec-Fetch-Site: same-site and no Origin): a page of another origin sent it; " + only
		}
		return ""
	}
	u, err := url.Parse(origin)
	web := err == nil && (u.Scheme == "http" || u.Scheme == "https")
	if device && !web && origin != "null" {
		return ""
	}
	if !web || u.Host == "" {
		return fmt.Sprintf("cross-origin request refused: Origin %q is not this server's; %s", httpapi.TruncateUTF8(origin, 100), only)
	}
	host, port, ok := splitHost(u.Host, defaultPort(u.Scheme))
	if ok && s.answersFor(r, host, port) {
		return ""
	}
	return fmt.Sprintf("cross-origin request refused: Origin %q is not this server (Host %q); %s "+
		"(a name the server is reached by goes in the config's admin.allowedHosts)", httpapi.TruncateUTF8(origin, 100), httpapi.TruncateUTF8(r.Host, 100), only)
}
