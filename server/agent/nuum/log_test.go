package nuum

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"termlink/server/config"
)

// logRecorder keeps the runner's log records: the tests read what
// happened, and in which order, from them (an agent started, exited and
// why, crashed and how long its restart waits) instead of timing it.
type logRecorder struct {
	mu      sync.Mutex
	entries []logEntry
}

type logEntry struct {
	At    time.Time
	Msg   string
	Attrs map[string]slog.Value
}

func (e logEntry) str(key string) string { return e.Attrs[key].String() }

// recordLog makes o's logger also record into the returned recorder.
func recordLog(o *Options) *logRecorder {
	rec := &logRecorder{}
	o.Logger = slog.New(recHandler{next: o.Logger.Handler(), rec: rec})
	return rec
}

// newRecordedRunner is newRunner with its log recorded.
func newRecordedRunner(tb testing.TB, flags string, edit func(*Options)) (*Runner, *logRecorder) {
	tb.Helper()
	var rec *logRecorder
	r := newRunner(tb, flags, func(_ *config.NuumAgent, o *Options) {
		if edit != nil {
			edit(o)
		}
		rec = recordLog(o)
	})
	return r, rec
}

// find returns the records with message msg, in order.
func (l *logRecorder) find(msg string) []logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logEntry
	for _, e := range l.entries {
		if e.Msg == msg {
			out = append(out, e)
		}
	}
	return out
}

// wait returns the records with message msg once there are n, or fails
// after a generous guard against a hang.
func (l *logRecorder) wait(tb testing.TB, msg string, n int) []logEntry {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if es := l.find(msg); len(es) >= n {
			return es
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d %q records, want %d", len(l.find(msg)), msg, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type recHandler struct {
	next  slog.Handler
	rec   *logRecorder
	attrs []slog.Attr
}

func (h recHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recHandler) Handle(ctx context.Context, r slog.Record) error {
	e := logEntry{At: r.Time, Msg: r.Message, Attrs: map[string]slog.Value{}}
	for _, a := range h.attrs {
		e.Attrs[a.Key] = a.Value.Resolve()
	}
	r.Attrs(func(a slog.Attr) bool {
		e.Attrs[a.Key] = a.Value.Resolve()
		return true
	})
	h.rec.mu.Lock()
	h.rec.entries = append(h.rec.entries, e)
	h.rec.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h recHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recHandler{next: h.next.WithAttrs(as), rec: h.rec, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h recHandler) WithGroup(name string) slog.Handler {
	return recHandler{next: h.next.WithGroup(name), rec: h.rec, attrs: h.attrs}
}
