package wal

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppend runs b.N appends of 200-byte records from a fixed
// number of goroutines and reports records/s, fsyncs/s, records per sync
// and the p50/p99 latency of one Append. 64 appenders match the 64
// goroutines of server/session's BenchmarkAppendParallel on 2 CPUs.
func BenchmarkAppend(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, appenders := range []int{1, 16, 64, 256} {
			name := fmt.Sprintf("appenders=%d/fsync", appenders)
			if !sync {
				name = fmt.Sprintf("appenders=%d/nosync", appenders)
			}
			b.Run(name, func(b *testing.B) { benchAppend(b, appenders, !sync) })
		}
	}
}

func benchAppend(b *testing.B, appenders int, noSync bool) {
	l, _ := open(b, b.TempDir(), Options{NoSync: noSync})
	payload := make([]byte, 200)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	ctx := context.Background()
	var next atomic.Int64
	lat := make([][]time.Duration, appenders)
	var wg sync.WaitGroup
	start := l.Stats()
	b.ResetTimer()
	for g := range appenders {
		wg.Go(func() {
			var own []time.Duration
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if _, err := l.Append(ctx, payload); err != nil {
					b.Error(err)
					return
				}
				own = append(own, time.Since(t0))
			}
			lat[g] = own
		})
	}
	wg.Wait()
	b.StopTimer()
	st := l.Stats()
	all := slices.Concat(lat...)
	slices.Sort(all)
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/secs, "records/s")
	b.ReportMetric(float64(st.Syncs-start.Syncs)/secs, "fsyncs/s")
	b.ReportMetric(float64(st.Appends-start.Appends)/float64(st.Batches-start.Batches), "records/batch")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
}
