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

// With --server auto, nothing answering, no fallback and nothing saved,
// termd browses again (a device never gives up; before, it exited, and
// under load a browse that missed the server ended termd:
// TestTermdServerAuto, stress run 26). Not parallel: it shortens the
// package's wait between browses.
func TestResolveAutoBrowsesAgain(t *testing.T) {
	defer func(i, m time.Duration) { autoRetryInitial, autoRetryMax = i, m }(autoRetryInitial, autoRetryMax)
	autoRetryInitial, autoRetryMax = 10*time.Millisecond, 20*time.Millisecond
	// Two browse windows (3 s each) and the wait between them.
	ctx, cancel := context.WithTimeout(t.Context(), 7*time.Second)
	defer cancel()
	var shown screens
	url, err := resolveAuto(ctx, &shown, slog.New(slog.DiscardHandler), fmt.Sprintf("nobody-%d", rand.Uint32()),
		"terminal-dev", "", t.TempDir())
	if err == nil || ctx.Err() == nil {
		t.Fatalf("resolveAuto = %q, %v before its context ended; want it browsing until then", url, err)
	}
	finding, retry := 0, 0
	for _, s := range shown {
		switch s {
		case "finding server":
			finding++
		case "no server; retry":
			retry++
		}
	}
	if finding < 2 || retry < 1 {
		t.Fatalf("the display showed %q; want it to find, say it retries, and find again", shown)
	}
}
