package stdiotest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
)

// Log keeps a runner's log records: a test reads what happened, and in
// which order, from them (an agent started, exited and why, crashed and
// how long its restart waits) instead of timing it.
type Log struct {
	mu      sync.Mutex
	entries []Entry
}

// Entry is one log record: its time, message and attributes (those of
// the logger's With too).
type Entry struct {
	At    time.Time
	Msg   string
	Attrs map[string]slog.Value
}

// Str is the attribute key as a string.
func (e Entry) Str(key string) string { return e.Attrs[key].String() }

// RecordLog returns a logger that logs to l and records into the
// returned Log.
func RecordLog(l *slog.Logger) (*slog.Logger, *Log) {
	rec := &Log{}
	return slog.New(recHandler{next: l.Handler(), rec: rec}), rec
}

// Find returns the records with message msg, in order.
func (l *Log) Find(msg string) []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Entry
	for _, e := range l.entries {
		if e.Msg == msg {
			out = append(out, e)
		}
	}
	return out
}

// Wait returns the records with message msg once there are n.
func (l *Log) Wait(tb testing.TB, msg string, n int) []Entry {
	tb.Helper()
	var es []Entry
	testwait.UntilOK(tb, fmt.Sprintf("%d %q records", n, msg), func() error {
		if es = l.Find(msg); len(es) < n {
			return fmt.Errorf("%d", len(es))
		}
		return nil
	})
	return es
}

type recHandler struct {
	next  slog.Handler
	rec   *Log
	attrs []slog.Attr
}

func (h recHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recHandler) Handle(ctx context.Context, r slog.Record) error {
	e := Entry{At: r.Time, Msg: r.Message, Attrs: map[string]slog.Value{}}
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
