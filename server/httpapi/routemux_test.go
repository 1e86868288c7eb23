package httpapi

import (
	"net/http"
	"slices"
	"testing"
)

// A RouteMux remembers every pattern and the class each route declared;
// a route registered without one is no device or raw-body route.
func TestRouteMuxClasses(t *testing.T) {
	m := NewRouteMux()
	h := func(http.ResponseWriter, *http.Request) {}
	HandleClass(m, "GET /dev", DeviceRoute, h)
	HandleClass(m, "POST /up", RawBodyRoute, h)
	m.HandleFunc("GET /op", h)
	if got := m.Patterns(); !slices.Equal(got, []string{"GET /dev", "POST /up", "GET /op"}) {
		t.Fatalf("patterns %v", got)
	}
	dev, raw := m.Is(DeviceRoute), m.Is(RawBodyRoute)
	if !dev("GET /dev") || dev("POST /up") || dev("GET /op") || !raw("POST /up") || raw("GET /op") {
		t.Fatalf("classes %v", m.Classes())
	}
}
