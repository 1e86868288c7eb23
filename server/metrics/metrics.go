// Package metrics is a small Prometheus text-format (version 0.0.4)
// registry: counters, gauges and histograms with one optional label set,
// lock-free on the hot path. It exists so the server needs no client
// library for the handful of series /metrics serves.
package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Registry holds metrics in registration order.
type Registry struct {
	mu      sync.Mutex
	metrics []writer
}

type writer interface{ write(w io.Writer) }

// WriteText writes every metric in Prometheus text format.
func (r *Registry) WriteText(w io.Writer) {
	r.mu.Lock()
	ms := append([]writer(nil), r.metrics...)
	r.mu.Unlock()
	for _, m := range ms {
		m.write(w)
	}
}

func (r *Registry) add(m writer) {
	r.mu.Lock()
	r.metrics = append(r.metrics, m)
	r.mu.Unlock()
}

type desc struct {
	name, help, kind string
	label            string // label name, "" for none
}

func (d desc) header(w io.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", d.name, d.help, d.name, d.kind)
}

func (d desc) series(suffix, labelValue, extra string) string {
	var parts []string
	if d.label != "" {
		parts = append(parts, d.label+`="`+escape(labelValue)+`"`)
	}
	if extra != "" {
		parts = append(parts, extra)
	}
	if len(parts) == 0 {
		return d.name + suffix
	}
	return d.name + suffix + "{" + strings.Join(parts, ",") + "}"
}

func escape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(s)
}

// vec maps label values to children, created on first use.
type vec[T any] struct {
	mu       sync.RWMutex
	children map[string]*T
}

func (v *vec[T]) get(label string) *T {
	v.mu.RLock()
	c := v.children[label]
	v.mu.RUnlock()
	if c != nil {
		return c
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c = v.children[label]; c == nil {
		if v.children == nil {
			v.children = map[string]*T{}
		}
		c = new(T)
		v.children[label] = c
	}
	return c
}

func (v *vec[T]) each(fn func(label string, c *T)) {
	v.mu.RLock()
	keys := make([]string, 0, len(v.children))
	for k := range v.children {
		keys = append(keys, k)
	}
	v.mu.RUnlock()
	sort.Strings(keys)
	for _, k := range keys {
		fn(k, v.get(k))
	}
}

// CounterVec is a counter per label value.
type CounterVec struct {
	desc
	v vec[atomic.Uint64]
}

// NewCounterVec registers a counter with one label (label "" for none).
func (r *Registry) NewCounterVec(name, help, label string) *CounterVec {
	c := &CounterVec{desc: desc{name: name, help: help, kind: "counter", label: label}}
	r.add(c)
	return c
}

// Add adds n to the series for label.
func (c *CounterVec) Add(label string, n uint64) { c.v.get(label).Add(n) }

// Inc adds one.
func (c *CounterVec) Inc(label string) { c.Add(label, 1) }

// Value is the current count for label.
func (c *CounterVec) Value(label string) uint64 { return c.v.get(label).Load() }

func (c *CounterVec) write(w io.Writer) {
	c.header(w)
	c.v.each(func(l string, v *atomic.Uint64) {
		fmt.Fprintf(w, "%s %d\n", c.series("", l, ""), v.Load())
	})
}

// GaugeVec is a gauge per label value.
type GaugeVec struct {
	desc
	v vec[atomic.Int64]
}

// NewGaugeVec registers a gauge with one label (label "" for none).
func (r *Registry) NewGaugeVec(name, help, label string) *GaugeVec {
	g := &GaugeVec{desc: desc{name: name, help: help, kind: "gauge", label: label}}
	r.add(g)
	return g
}

// Add adds n (may be negative).
func (g *GaugeVec) Add(label string, n int64) { g.v.get(label).Add(n) }

// Value is the current value for label.
func (g *GaugeVec) Value(label string) int64 { return g.v.get(label).Load() }

func (g *GaugeVec) write(w io.Writer) {
	g.header(w)
	g.v.each(func(l string, v *atomic.Int64) {
		fmt.Fprintf(w, "%s %d\n", g.series("", l, ""), v.Load())
	})
}

// HistogramVec is a histogram per label value with fixed upper bounds.
type HistogramVec struct {
	desc
	bounds []float64
	v      vec[histogram]
}

type histogram struct {
	once   sync.Once
	counts []atomic.Uint64 // one per bound, plus +Inf
	sumNs  atomic.Uint64   // sum in nanounits (value*1e9) to stay lock-free
}

// NewHistogramVec registers a histogram with the given ascending bounds.
func (r *Registry) NewHistogramVec(name, help, label string, bounds []float64) *HistogramVec {
	h := &HistogramVec{desc: desc{name: name, help: help, kind: "histogram", label: label}, bounds: bounds}
	r.add(h)
	return h
}

func (h *HistogramVec) child(label string) *histogram {
	c := h.v.get(label)
	c.once.Do(func() { c.counts = make([]atomic.Uint64, len(h.bounds)+1) })
	return c
}

// Observe records value v for label.
func (h *HistogramVec) Observe(label string, v float64) {
	c := h.child(label)
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v
	c.counts[i].Add(1)
	if v > 0 && !math.IsInf(v, 0) {
		c.sumNs.Add(uint64(v * 1e9))
	}
}

// Count is the number of observations for label.
func (h *HistogramVec) Count(label string) uint64 {
	var n uint64
	c := h.child(label)
	for i := range c.counts {
		n += c.counts[i].Load()
	}
	return n
}

func (h *HistogramVec) write(w io.Writer) {
	h.header(w)
	h.v.each(func(l string, _ *histogram) {
		c := h.child(l)
		var cum uint64
		for i, b := range h.bounds {
			cum += c.counts[i].Load()
			fmt.Fprintf(w, "%s %d\n", h.series("_bucket", l, `le="`+strconv.FormatFloat(b, 'g', -1, 64)+`"`), cum)
		}
		cum += c.counts[len(h.bounds)].Load()
		fmt.Fprintf(w, "%s %d\n", h.series("_bucket", l, `le="+Inf"`), cum)
		fmt.Fprintf(w, "%s %g\n", h.series("_sum", l, ""), float64(c.sumNs.Load())/1e9)
		fmt.Fprintf(w, "%s %d\n", h.series("_count", l, ""), cum)
	})
}

// Func is a series whose value is read when /metrics is scraped, for
// counts another component already keeps (the write-ahead log's counters).
type Func struct {
	desc
	fn func() float64
}

// NewCounterFunc registers a counter read from fn at scrape time; fn must
// never decrease and be safe to call from any goroutine.
func (r *Registry) NewCounterFunc(name, help string, fn func() float64) *Func {
	f := &Func{desc: desc{name: name, help: help, kind: "counter"}, fn: fn}
	r.add(f)
	return f
}

// NewGaugeFunc registers a gauge read from fn at scrape time.
func (r *Registry) NewGaugeFunc(name, help string, fn func() float64) *Func {
	f := &Func{desc: desc{name: name, help: help, kind: "gauge"}, fn: fn}
	r.add(f)
	return f
}

func (f *Func) write(w io.Writer) {
	f.header(w)
	fmt.Fprintf(w, "%s %s\n", f.series("", "", ""), strconv.FormatFloat(f.fn(), 'g', -1, 64))
}
