package discover

import (
	"bytes"
	"log/slog"
	"testing"
)

// The mDNS library's standard-log lines go to slog at debug; other lines
// at warn.
func TestStdLogWriter(t *testing.T) {
	var buf bytes.Buffer
	w := stdLogWriter{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))}
	for _, line := range []string{"[INFO] mdns: Closing client {true}\n", "[ERR] mdns: Failed to unpack packet: x\n", "something else\n"} {
		if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	want := `level=DEBUG msg="mdns library" detail="Closing client {true}"
level=DEBUG msg="mdns library" err="Failed to unpack packet: x"
level=WARN msg="something else"
`
	if got := buf.String(); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}
