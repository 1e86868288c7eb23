package wschannel

import (
	"strings"
	"testing"

	"termlink/link"
)

// A frame type routed twice, or a route without a handler, is a
// composition error found at construction.
func TestFrameRoutesRefuseDuplicates(t *testing.T) {
	h := func(FrameSource, link.Frame) error { return nil }
	for name, routes := range map[string][]FrameRoute{
		"twice":      {{Type: link.TypeScreen, Handle: h}, {Type: link.TypeScreen, Handle: h}},
		"no handler": {{Type: link.TypeNoticeAck}},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "frame route") {
					t.Errorf("%s: recovered %v, want a frame route panic", name, r)
				}
			}()
			frameRoutes(routes)
		}()
	}
	if m := frameRoutes([]FrameRoute{{Type: link.TypeScreen, Handle: h}}); len(m) != 1 {
		t.Errorf("one route: %v", m)
	}
}
