package metrics

import (
	"fmt"
	"io"
	"strings"
)

// GaugeSet is a gauge with any number of labels whose series are computed
// when /metrics is read, from state kept elsewhere (the device registry):
// nothing to keep in step.
type GaugeSet struct {
	name, help string
	labels     []string
	collect    func(emit func(value int64, labelValues ...string))
}

// NewGaugeSet registers a gauge with the given label names; collect calls
// emit once per series, with one value per label name.
func (r *Registry) NewGaugeSet(name, help string, labels []string, collect func(emit func(value int64, labelValues ...string))) *GaugeSet {
	g := &GaugeSet{name: name, help: help, labels: labels, collect: collect}
	r.add(g)
	return g
}

func (g *GaugeSet) write(w io.Writer) {
	desc{name: g.name, help: g.help, kind: "gauge"}.header(w)
	g.collect(func(v int64, values ...string) {
		parts := make([]string, len(g.labels))
		for i, l := range g.labels {
			val := ""
			if i < len(values) {
				val = values[i]
			}
			parts[i] = l + `="` + escape(val) + `"`
		}
		fmt.Fprintf(w, "%s{%s} %d\n", g.name, strings.Join(parts, ","), v)
	})
}
