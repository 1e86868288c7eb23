package load

import (
	"math"
	"slices"
	"time"
)

// Latency summarises duration samples, in milliseconds.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// summarize sorts samples in place and returns their exact percentiles.
func summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	return Latency{
		N:   len(samples),
		P50: ms(percentile(samples, 50)),
		P90: ms(percentile(samples, 90)),
		P99: ms(percentile(samples, 99)),
		Max: ms(samples[len(samples)-1]),
	}
}

// percentile returns the p-th percentile (0..100) of sorted by the
// nearest-rank method: the smallest sample such that at least p% of the
// samples are <= it. It returns 0 for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// ms converts d to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
