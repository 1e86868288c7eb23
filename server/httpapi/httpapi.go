// Package httpapi holds what every route of termserver's HTTP API shares:
// JSON answers, the one body policy (Decode, CheckBody), the operator a
// request was let through as, and the Mux a capability package registers
// its routes on. The guard itself (Host, Origin, admin tokens) is the
// server's; it wraps the mux the routes are registered on.
package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"termlink/internal/textcut"
	"termlink/server/config"
)

// Mux is what a capability package registers its routes on (an
// *http.ServeMux, or the server's mux that remembers its patterns).
type Mux interface {
	HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request))
}

// A RouteClass is who calls a route and what its writes carry, declared
// where the route is registered (HandleClass) and read by the server's
// guard (issue 39: not assembled in the root from each package's list).
type RouteClass uint8

const (
	// OperatorRoute: an operator's or viewer's (admin token; writes take JSON).
	OperatorRoute RouteClass = iota
	// DeviceRoute: a device's (no admin token: the route checks the device's
	// own credential; writes take JSON).
	DeviceRoute
	// RawBodyRoute: an operator's whose writes take application/octet-stream
	// (bounded and checked by the route itself: a release upload).
	RawBodyRoute
)

// classMux is a Mux that keeps each route's class (the server's).
type classMux interface {
	HandleClass(pattern string, c RouteClass, h func(http.ResponseWriter, *http.Request))
}

// HandleClass registers h on mux as a route of class c. A mux that keeps
// no classes (a test's *http.ServeMux) takes it as any route.
func HandleClass(mux Mux, pattern string, c RouteClass, h func(http.ResponseWriter, *http.Request)) {
	if m, ok := mux.(classMux); ok {
		m.HandleClass(pattern, c, h)
		return
	}
	mux.HandleFunc(pattern, h)
}

// WriteJSON answers with v as indented JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError answers with {"error": msg}.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, map[string]string{"error": msg})
}

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

// WithOperator is r as let through for op (the guard's).
func WithOperator(r *http.Request, op Operator) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), operatorKey{}, op))
}

// TruncateUTF8 cuts s to at most n bytes without splitting a character.
func TruncateUTF8(s string, n int) string { return textcut.Cut(s, n) }

// StatusError is a refusal with the HTTP status an API answers it with
// (a store's error its handlers write with WriteError).
type StatusError struct {
	Status int
	Msg    string
}

func (e *StatusError) Error() string { return e.Msg }

// Refuse makes a StatusError.
func Refuse(status int, format string, a ...any) *StatusError {
	return &StatusError{Status: status, Msg: fmt.Sprintf(format, a...)}
}

// Bearer is the token of an "Authorization: Bearer <token>" header value:
// the scheme is case-insensitive (RFC 7235 section 2.1), spaces around
// the token are dropped (RFC 6750's b64token has none). It is the one
// parser of the header: the operator guard, the device WebSocket and the
// device downloads all call it. ok is false for another scheme or no
// token.
func Bearer(h string) (token string, ok bool) {
	scheme, tok, found := strings.Cut(strings.TrimSpace(h), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
