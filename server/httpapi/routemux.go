package httpapi

import "net/http"

// RouteMux is the server's Mux: an *http.ServeMux that remembers its
// patterns (for the test that every guarded route refuses a request
// without a token) and the class each route declared (HandleClass),
// which the guard reads (Is).
type RouteMux struct {
	*http.ServeMux
	patterns []string
	classes  map[string]RouteClass
}

// NewRouteMux is an empty RouteMux.
func NewRouteMux() *RouteMux {
	return &RouteMux{ServeMux: http.NewServeMux(), classes: map[string]RouteClass{}}
}

// HandleClass registers h as a route of class c.
func (m *RouteMux) HandleClass(pattern string, c RouteClass, h func(http.ResponseWriter, *http.Request)) {
	m.classes[pattern] = c
	m.HandleFunc(pattern, h)
}

// Handle registers h (a route of no declared class: OperatorRoute).
func (m *RouteMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers h (a route of no declared class: OperatorRoute).
func (m *RouteMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.HandleFunc(pattern, h)
}

// Patterns are the routes registered, in order.
func (m *RouteMux) Patterns() []string { return m.patterns }

// Classes are the classes the routes declared, by pattern.
func (m *RouteMux) Classes() map[string]RouteClass { return m.classes }

// Is reports whether a route declared class c (the guard asks it once
// every route is registered, before any request is served).
func (m *RouteMux) Is(c RouteClass) func(pattern string) bool {
	return func(pattern string) bool {
		rc, ok := m.classes[pattern]
		return ok && rc == c
	}
}
