package server

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"termlink/server/config"
	"termlink/server/session"
)

// writeSessionLogs writes sessions session files of about perSession bytes
// each, as the flood of the bounds issue leaves them: 20,000-character
// messages, each answered with an echo, the last few unanswered.
func writeSessionLogs(b *testing.B, dir string, sessions, perSession int) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("flood ", 20000/6)
	for i := range sessions {
		key := fmt.Sprintf("terminal-dev:local:peer-%d", i)
		name, _ := session.FileName(key)
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		meta, _ := session.Metadata{Key: key, CreatedAt: session.Now(), UpdatedAt: session.Now()}.MarshalJSON()
		w.Write(append(meta, '\n'))
		written := 0
		for m := 0; written < perSession; m++ {
			id := fmt.Sprintf("m-%d", m)
			u, _ := session.Record{Role: "user", Content: text, Timestamp: session.Now(), MessageID: id, RunID: "r-" + id}.MarshalJSON()
			w.Write(append(u, '\n'))
			written += len(u) + 1
			if written < perSession-200_000 { // the last ~5 stay unanswered
				a, _ := session.Record{Role: "assistant", Content: "You said: " + text, Timestamp: session.Now(), MessageID: id, RunID: "r-" + id, FinishReason: "stop"}.MarshalJSON()
				w.Write(append(a, '\n'))
				written += len(a) + 1
			}
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkRebuild measures New (open the log, read the session tails,
// rebuild dedupe, mark interrupted runs) on 200 MB of session logs (1 GB
// more with TERMLINK_BENCH_1GB=1). Run it short:
// go test -run XXX -bench Rebuild -benchtime 3x ./server/
func BenchmarkRebuild(b *testing.B) {
	shapes := []struct{ sessions, size int }{{10, 20 << 20}, {2, 100 << 20}, {2000, 100 << 10}}
	if os.Getenv("TERMLINK_BENCH_1GB") != "" { // the flood of the bounds issue: 1 GB in 10 sessions
		shapes = append(shapes, struct{ sessions, size int }{10, 100 << 20})
	}
	for _, shape := range shapes {
		b.Run(fmt.Sprintf("%dx%dKB", shape.sessions, shape.size>>10), func(b *testing.B) {
			workspace := b.TempDir()
			writeSessionLogs(b, filepath.Join(workspace, "sessions"), shape.sessions, shape.size)
			cfg := config.Default()
			cfg.Workspace = workspace
			b.ResetTimer()
			for range b.N {
				s, err := New(cfg, Options{Logger: quietLog(), NoSync: true})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.recovered = nil
				_ = s.Shutdown(context.Background())
				b.StartTimer()
			}
			b.ReportMetric(float64(shape.sessions*shape.size)/(1<<20), "MB-of-logs")
		})
	}
}
