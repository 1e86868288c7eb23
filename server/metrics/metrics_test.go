package metrics

import (
	"strings"
	"testing"
)

func TestTextFormat(t *testing.T) {
	var r Registry
	c := r.NewCounterVec("termlink_inbound_total", "Messages accepted.", "channel")
	g := r.NewGaugeVec("termlink_connections", "Live connections.", "channel")
	h := r.NewHistogramVec("termlink_run_seconds", "Run latency.", "channel", []float64{0.001, 0.01, 0.1})
	c.Inc("terminal-dev")
	c.Add("terminal-dev", 2)
	c.Inc(`we"ird`)
	g.Add("terminal-dev", 3)
	g.Add("terminal-dev", -1)
	h.Observe("terminal-dev", 0.0005)
	h.Observe("terminal-dev", 0.05)
	h.Observe("terminal-dev", 5)
	var b strings.Builder
	r.WriteText(&b)
	want := `# HELP termlink_inbound_total Messages accepted.
# TYPE termlink_inbound_total counter
termlink_inbound_total{channel="terminal-dev"} 3
termlink_inbound_total{channel="we\"ird"} 1
# HELP termlink_connections Live connections.
# TYPE termlink_connections gauge
termlink_connections{channel="terminal-dev"} 2
# HELP termlink_run_seconds Run latency.
# TYPE termlink_run_seconds histogram
termlink_run_seconds_bucket{channel="terminal-dev",le="0.001"} 1
termlink_run_seconds_bucket{channel="terminal-dev",le="0.01"} 1
termlink_run_seconds_bucket{channel="terminal-dev",le="0.1"} 2
termlink_run_seconds_bucket{channel="terminal-dev",le="+Inf"} 3
termlink_run_seconds_sum{channel="terminal-dev"} 5.0505
termlink_run_seconds_count{channel="terminal-dev"} 3
`
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	if c.Value("terminal-dev") != 3 || g.Value("terminal-dev") != 2 || h.Count("terminal-dev") != 3 {
		t.Fatal("Value/Count disagree with the text")
	}
}

func TestGaugeSet(t *testing.T) {
	var r Registry
	n := int64(2)
	r.NewGaugeSet("termserver_devices_online", "Devices online.", []string{"channel", "tag"}, func(emit func(int64, ...string)) {
		emit(n, "terminal-dev", "")
		emit(1, "terminal-dev", `site=lo"bby`)
	})
	var b strings.Builder
	r.WriteText(&b)
	want := `# HELP termserver_devices_online Devices online.
# TYPE termserver_devices_online gauge
termserver_devices_online{channel="terminal-dev",tag=""} 2
termserver_devices_online{channel="terminal-dev",tag="site=lo\"bby"} 1
`
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
