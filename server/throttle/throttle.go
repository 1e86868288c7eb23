// Package throttle is the one rule for what a device, an unauthenticated
// client or a bad request can make the server write: a log line or an
// event. Each is admitted per source (a peer id, a remote network, a
// connection) and per kind (a short constant naming what happened): a
// source may write Burst of a kind at once, and Burst more per Every; all
// sources together KindBurst of a kind at once and KindBurst more per
// Every, so a flood from many addresses is bounded too. The rest are
// counted, and one summary line per kind per Every says how many were
// held back, from how many sources, and the last one's source and detail. Every string written is cut to MaxField
// bytes (on a UTF-8 boundary, with the original length said), so no field
// longer than its wire bound is ever logged or stored whole.
//
// The state is bounded: at most MaxSources (source, kind) buckets are
// tracked; past that, new sources share one overflow bucket per kind, so
// a flood from a million addresses costs what one source costs.
package throttle

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"termlink/internal/textcut"
)

// Defaults of Options.
const (
	DefaultBurst      = 10
	DefaultKindBurst  = 100
	DefaultEvery      = time.Minute
	DefaultMaxSources = 4096
	DefaultMaxField   = 256
)

// Options configure a Gate; zero values take the defaults.
type Options struct {
	Burst      int              // written in full at once, per source and kind
	KindBurst  int              // written in full at once per kind from all sources, and then per Every
	Every      time.Duration    // the refill interval; and one summary per kind per Every
	MaxSources int              // (source, kind) buckets tracked
	MaxField   int              // bytes of any string logged
	Now        func() time.Time // the clock (tests)
	// Summary, when set, is called instead of logging each summary
	// (tests; a metric). It runs without the gate's lock.
	Summary func(Summary)
}

// Summary is what a Gate held back of one kind in one interval.
type Summary struct {
	Kind       string
	Held       int    // lines or events not written
	Sources    int    // distinct sources among them (the overflow bucket counts once)
	LastSource string // the last one held back
	LastDetail string
}

// Gate admits lines and events from outside. Safe for concurrent use;
// Close stops its timer.
type Gate struct {
	log *slog.Logger
	opt Options

	mu      sync.Mutex
	buckets map[key]*bucket
	kinds   map[string]*bucket   // all sources of a kind
	held    map[string]*heldKind // by kind
	timer   *time.Timer
	pruner  *time.Timer // pruneTick's, while buckets are kept
	pruned  time.Time   // the last pruneLocked
	closed  bool
}

type key struct{ kind, source string }

// bucket is a token bucket: a source's refills Burst per Every, a
// kind's KindBurst per Every.
type bucket struct {
	tokens float64
	at     time.Time
}

type heldKind struct {
	count   int
	sources map[string]bool // bounded: at most maxHeldSources
	last    string
	detail  string
}

// maxHeldSources bounds the distinct sources a summary counts exactly.
const maxHeldSources = 1024

// overflowSource is the shared source of a kind past MaxSources buckets.
const overflowSource = "(other sources)"

// New returns a Gate that writes to log (nil: slog.Default()).
func New(log *slog.Logger, opt Options) *Gate {
	if log == nil {
		log = slog.Default()
	}
	if opt.Burst <= 0 {
		opt.Burst = DefaultBurst
	}
	if opt.Every <= 0 {
		opt.Every = DefaultEvery
	}
	if opt.KindBurst <= 0 {
		opt.KindBurst = max(DefaultKindBurst, opt.Burst)
	}
	if opt.MaxSources <= 0 {
		opt.MaxSources = DefaultMaxSources
	}
	if opt.MaxField <= 0 {
		opt.MaxField = DefaultMaxField
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Gate{log: log, opt: opt, buckets: map[key]*bucket{}, kinds: map[string]*bucket{}, held: map[string]*heldKind{}}
}

// Allow reports whether one line or event of kind from source may be
// written now; if not, it is counted for kind's summary with detail (cut
// to MaxField). A nil Gate allows everything.
func (g *Gate) Allow(kind, source, detail string) bool {
	if g == nil {
		return true
	}
	now := g.opt.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	k := key{kind, textcut.Cut(source, g.opt.MaxField)}
	b := g.buckets[k]
	if b == nil {
		if len(g.buckets) >= g.opt.MaxSources-1 && now.Sub(g.pruned) >= g.opt.Every/time.Duration(g.opt.Burst) {
			g.pruneLocked(now)
		}
		if len(g.buckets) >= g.opt.MaxSources-1 { // one is kept for the overflow
			k.source = overflowSource
			b = g.buckets[k]
		}
		if b == nil {
			b = &bucket{tokens: float64(g.opt.Burst), at: now}
			g.buckets[k] = b
			g.schedulePruneLocked()
		}
	}
	b.refill(now, float64(g.opt.Burst), float64(g.opt.Burst)/float64(g.opt.Every))
	kb := g.kinds[kind]
	if kb == nil {
		kb = &bucket{tokens: float64(g.opt.KindBurst), at: now}
		g.kinds[kind] = kb
	}
	kb.refill(now, float64(g.opt.KindBurst), float64(g.opt.KindBurst)/float64(g.opt.Every))
	if b.tokens >= 1 && kb.tokens >= 1 {
		b.tokens--
		kb.tokens--
		return true
	}
	h := g.held[kind]
	if h == nil {
		h = &heldKind{sources: map[string]bool{}}
		g.held[kind] = h
	}
	h.count++
	if len(h.sources) < maxHeldSources {
		h.sources[k.source] = true
	}
	h.last, h.detail = k.source, g.Field(detail)
	if g.timer == nil && !g.closed {
		g.timer = time.AfterFunc(g.opt.Every, g.flush)
	}
	return false
}

// refill adds perNs tokens for each nanosecond since the last, up to max.
func (b *bucket) refill(now time.Time, max, perNs float64) {
	if el := now.Sub(b.at); el > 0 {
		b.tokens = min(max, b.tokens+float64(el)*perNs)
		b.at = now
	}
}

// pruneLocked forgets the buckets that are full again (they behave as
// new ones would). A map emptied is replaced: a map keeps its table
// after deletes, and a gate that saw 10,000 devices connect would
// otherwise hold the table of its MaxSources buckets for good.
func (g *Gate) pruneLocked(now time.Time) {
	g.pruned = now
	for k, b := range g.buckets {
		if b.tokens+float64(now.Sub(b.at))*float64(g.opt.Burst)/float64(g.opt.Every) >= float64(g.opt.Burst) {
			delete(g.buckets, k)
		}
	}
	if len(g.buckets) == 0 {
		g.buckets = map[key]*bucket{}
	}
}

// refillOne is how long a bucket takes to get one token back.
func (g *Gate) refillOne() time.Duration { return g.opt.Every / time.Duration(g.opt.Burst) }

// schedulePruneLocked has the buckets pruned once the newest can be full
// again, and then every refillOne while any is kept: a quiet gate holds
// none (g.mu held). An idle fleet's connects leave the "device connected"
// line's buckets, MaxSources of them, otherwise kept until more sources
// than that came (issue 41: tens of bytes per idle device at 10,000).
func (g *Gate) schedulePruneLocked() {
	if g.pruner == nil && !g.closed {
		g.pruner = time.AfterFunc(g.refillOne(), g.pruneTick)
	}
}

func (g *Gate) pruneTick() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruner = nil
	if g.closed {
		return
	}
	g.pruneLocked(g.opt.Now())
	if len(g.buckets) > 0 {
		g.schedulePruneLocked()
	}
}

// Field is s cut to the gate's MaxField bytes; a cut one ends with how
// long it was.
func (g *Gate) Field(s string) string {
	n := DefaultMaxField
	if g != nil {
		n = g.opt.MaxField
	}
	return Cut(s, n)
}

// Cut is s cut to n bytes on a character boundary; a cut one ends with
// "…(N bytes)" (within n).
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	tail := fmt.Sprintf("…(%d bytes)", len(s))
	return textcut.Cut(s, n-len(tail)) + tail
}

// Log writes msg at level if Allow(kind, source, msg) admits it; every
// string argument is cut to MaxField. It reports whether it was written.
func (g *Gate) Log(level slog.Level, kind, source, msg string, args ...any) bool {
	if !g.Allow(kind, source, detailOf(msg, args)) {
		return false
	}
	log := slog.Default()
	if g != nil {
		log = g.log
	}
	for i, a := range args {
		switch v := a.(type) {
		case string:
			args[i] = g.Field(v)
		case error:
			if v != nil {
				args[i] = g.Field(v.Error())
			}
		case slog.Attr:
			if v.Value.Kind() == slog.KindString {
				args[i] = slog.String(v.Key, g.Field(v.Value.String()))
			}
		}
	}
	log.Log(context.Background(), level, g.Field(msg), args...)
	return true
}

// detailOf is what a summary says of a line held back: its message and
// its arguments' values.
func detailOf(msg string, args []any) string {
	var b strings.Builder
	b.WriteString(msg)
	for i := 1; i < len(args) && b.Len() < 1024; i += 2 {
		fmt.Fprintf(&b, " %v=%v", args[i-1], args[i])
	}
	return b.String()
}

// Every is the gate's interval.
func (g *Gate) Every() time.Duration { return g.opt.Every }

// Warn is Log at WARN; Info at INFO.
func (g *Gate) Warn(kind, source, msg string, args ...any) bool {
	return g.Log(slog.LevelWarn, kind, source, msg, args...)
}

// Info is Log at INFO.
func (g *Gate) Info(kind, source, msg string, args ...any) bool {
	return g.Log(slog.LevelInfo, kind, source, msg, args...)
}

// flush writes one summary per kind held back since the last.
func (g *Gate) flush() {
	g.mu.Lock()
	g.timer = nil
	sums := g.takeLocked()
	g.mu.Unlock()
	g.emit(sums)
}

func (g *Gate) takeLocked() []Summary {
	var sums []Summary
	for kind, h := range g.held {
		sums = append(sums, Summary{Kind: kind, Held: h.count, Sources: len(h.sources), LastSource: h.last, LastDetail: h.detail})
	}
	sort.Slice(sums, func(i, j int) bool { return sums[i].Kind < sums[j].Kind })
	clear(g.held)
	return sums
}

func (g *Gate) emit(sums []Summary) {
	for _, s := range sums {
		if g.opt.Summary != nil {
			g.opt.Summary(s)
			continue
		}
		g.log.Warn(s.Kind+" (summary)", "count", s.Held, "sources", s.Sources,
			"last_source", s.LastSource, "last", s.LastDetail, "note", "held back: counted, not logged one by one, at most once every "+g.opt.Every.String())
	}
}

// Flush writes the summaries now (tests, and Close).
func (g *Gate) Flush() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	sums := g.takeLocked()
	g.mu.Unlock()
	g.emit(sums)
}

// Close writes what is held back and stops the timer; Allow still works
// after it (a late line is counted, and written by a later Flush).
func (g *Gate) Close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.closed = true
	if g.pruner != nil {
		g.pruner.Stop()
		g.pruner = nil
	}
	g.mu.Unlock()
	g.Flush()
}
