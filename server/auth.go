package server

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"termlink/server/config"
)

// Operator authentication (DESIGN.md "HTTP"; issue 13). Every route under
// /api/ except the device WebSocket is guarded: with admin tokens it takes
// "Authorization: Bearer <token>" (viewer: GET and HEAD; operator: also
// POST, PUT, PATCH, DELETE); without any it answers loopback clients only.
// The guard wraps the whole mux (guard), so a route added later is guarded
// without anyone remembering to; RequireRole demands more of one route.

// wsPattern is the device WebSocket route, the only /api/ route the guard
// leaves to its own (device token) authentication.
const wsPattern = "GET /api/channels/{channel_id}/ws"

const noTokensMsg = "no admin tokens configured: the API answers loopback clients only"

type operatorKey struct{}

// Operator is who made an API request: the admin token's name and role
// ("local" and RoleOperator for a loopback client when no tokens are
// configured).
type Operator struct {
	Name string
	Role config.Role
}

// OperatorOf returns the operator the guard let through for r.
func OperatorOf(r *http.Request) Operator {
	if op, ok := r.Context().Value(operatorKey{}).(Operator); ok {
		return op
	}
	return Operator{}
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

// guard wraps mux: /api/* (but the device WebSocket) and, when the config
// says so, /metrics need a role fitting the method; the rest is open.
func (s *Server) guard(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.guarded(mux, r) {
			var ok bool
			if r, ok = s.authorize(w, r, roleFor(r.Method)); !ok {
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) guarded(mux *http.ServeMux, r *http.Request) bool {
	switch {
	case r.URL.Path == "/metrics":
		return s.cfg.Admin.MetricsRequireToken
	case !strings.HasPrefix(r.URL.Path, "/api/"):
		return false
	}
	_, pattern := mux.Handler(r)
	return pattern != wsPattern
}

// RequireRole wraps h so it answers only callers holding at least role
// (beyond what the guard asks for the method), e.g. a GET that shows what
// only operators may see.
func (s *Server) RequireRole(role config.Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r, ok := s.authorize(w, r, role); ok {
			h(w, r)
		}
	}
}

// authorize checks r against the admin tokens (or, with none, that it
// comes from a loopback client), answering 401 or 403 itself when it may
// not pass; the request it returns carries the Operator.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, need config.Role) (*http.Request, bool) {
	admin := s.cfg.Admin
	if !admin.Enabled() {
		if !localClient(r) {
			writeError(w, http.StatusForbidden, noTokensMsg)
			return r, false
		}
		return withOperator(r, Operator{Name: "local", Role: config.RoleOperator}), true
	}
	secret, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="termlink"`)
		writeError(w, http.StatusUnauthorized, "authorization required: send Authorization: Bearer <admin token>")
		return r, false
	}
	tok, ok := admin.Lookup(secret)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="termlink", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "the bearer token is not a configured admin token")
		return r, false
	}
	if tok.Role < need {
		writeError(w, http.StatusForbidden, "role "+tok.Role.String()+" may not "+r.Method+" "+r.URL.Path+": it needs role "+need.String())
		return r, false
	}
	return withOperator(r, Operator{Name: tok.Name, Role: tok.Role}), true
}

func withOperator(r *http.Request, op Operator) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), operatorKey{}, op))
}

// bearer extracts the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 7235).
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

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

// warnOpenAPI logs a warning when the server listens beyond loopback with
// no admin tokens: the operator API then refuses every remote client.
func (s *Server) warnOpenAPI(addr net.Addr) {
	if s.cfg.Admin.Enabled() {
		return
	}
	tcp, ok := addr.(*net.TCPAddr)
	if ok && tcp.IP.IsLoopback() {
		return
	}
	s.log.Warn("listening beyond loopback with no admin tokens: the operator API (/api/*) answers loopback clients only; "+
		"add an \"admin\" block with tokens to the config to use it remotely", "addr", addr.String())
}
