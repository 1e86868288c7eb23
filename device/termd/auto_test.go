package termd

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"termlink/device"
)

// screens records what resolveAuto draws (an LCD draws at once; the
// console driver only once the board runs, after it).
type screens []string

func (s *screens) Render(_ context.Context, m *device.Model, _ time.Time) error {
	*s = append(*s, m.Overlay.Text)
	return nil
}

// resolveAuto shows its progress on the display: searching, then the
// outcome.
func TestResolveAutoShowsOnDisplay(t *testing.T) {
	t.Parallel()
	var shown screens
	url, err := resolveAuto(t.Context(), &shown, slog.New(slog.DiscardHandler), fmt.Sprintf("nobody-%d", rand.Uint32()),
		"terminal-dev", "ws://192.0.2.1:8080/api/channels/terminal-dev/ws", t.TempDir())
	if err != nil || url != "ws://192.0.2.1:8080/api/channels/terminal-dev/ws" {
		t.Fatalf("resolveAuto = %q, %v; want the fallback", url, err)
	}
	if len(shown) != 2 || shown[0] != "finding server" || shown[1] != "none; fallback" {
		t.Fatalf("the display showed %q", shown)
	}
}
