package load

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	oneToHundred := make([]time.Duration, 100)
	for i := range oneToHundred {
		oneToHundred[i] = time.Duration(i+1) * time.Millisecond
	}
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single p0", []time.Duration{7}, 0, 7},
		{"single p50", []time.Duration{7}, 50, 7},
		{"single p100", []time.Duration{7}, 100, 7},
		{"1..100 p50", oneToHundred, 50, 50 * time.Millisecond},
		{"1..100 p90", oneToHundred, 90, 90 * time.Millisecond},
		{"1..100 p99", oneToHundred, 99, 99 * time.Millisecond},
		{"1..100 p99.5", oneToHundred, 99.5, 100 * time.Millisecond},
		{"1..100 p100", oneToHundred, 100, 100 * time.Millisecond},
		{"1..100 p0", oneToHundred, 0, 1 * time.Millisecond},
		{"ten p50", ten, 50, 5},
		{"ten p51", ten, 51, 6},
		{"ten p90", ten, 90, 9},
		{"ten p99", ten, 99, 10},
		{"two p50", []time.Duration{1, 100}, 50, 1},
		{"two p99", []time.Duration{1, 100}, 99, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	if got := summarize(nil); got != (Latency{}) {
		t.Errorf("summarize(nil) = %+v, want zero", got)
	}
	// 1000 samples 1ms..1000ms, shuffled: summarize must sort them.
	s := make([]time.Duration, 1000)
	for i := range s {
		s[i] = time.Duration(i+1) * time.Millisecond
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	got := summarize(s)
	want := Latency{N: 1000, P50: 500, P90: 900, P99: 990, Max: 1000}
	if got != want {
		t.Errorf("summarize(shuffled 1..1000ms) = %+v, want %+v", got, want)
	}
	// Sub-millisecond precision survives.
	got = summarize([]time.Duration{1500 * time.Microsecond, 250 * time.Microsecond})
	want = Latency{N: 2, P50: 0.25, P90: 1.5, P99: 1.5, Max: 1.5}
	if got != want {
		t.Errorf("summarize(250µs, 1.5ms) = %+v, want %+v", got, want)
	}
}
