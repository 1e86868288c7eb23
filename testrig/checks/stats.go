package checks

import (
	"math"
	"slices"
	"time"
)

// percentile returns the p-th percentile (0..100) of samples by the
// nearest-rank method; samples are sorted in place. It returns 0 for no
// samples.
func percentile(samples []time.Duration, p float64) time.Duration {
	n := len(samples)
	if n == 0 {
		return 0
	}
	slices.Sort(samples)
	rank := int(math.Ceil(p / 100 * float64(n)))
	return samples[min(max(rank, 1), n)-1]
}

// ms converts d to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// us converts d to microseconds.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// round3 rounds v to 3 decimals, for metrics that are read by people too.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
