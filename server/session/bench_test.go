package session

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// benchAppend runs b.N single-record appends from many goroutines spread
// over sessions, and reports appends/s and fsyncs per append.
func benchAppend(b *testing.B, opt Options, sessions, parallelism int) {
	s := openTest(b, opt)
	ctx := context.Background()
	var next atomic.Int64
	rec := Record{Role: "user", Content: "the quick brown fox jumps over the lazy dog", MessageID: "m-1"}
	// Create the files first: this measures appends, not creation.
	for i := 0; i < sessions; i++ {
		if err := s.Append(ctx, fmt.Sprintf("terminal-dev:local:dev-%d", i), rec); err != nil {
			b.Fatal(err)
		}
	}
	start := s.Stats()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprintf("terminal-dev:local:dev-%d", next.Add(1)%int64(sessions))
			if err := s.Append(ctx, key, rec); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	if !opt.NoSync {
		b.ReportMetric(float64(st.FileSyncs-start.FileSyncs)/float64(b.N), "fsyncs/append")
	}
	b.ReportMetric(float64(st.Appends-start.Appends)/float64(st.Batches-start.Batches), "appends/batch")
}

func BenchmarkAppendParallel(b *testing.B) {
	for _, sessions := range []int{1, 16, 256} {
		// SetParallelism(p) runs p*GOMAXPROCS goroutines.
		b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
			benchAppend(b, Options{}, sessions, 32)
		})
	}
	b.Run("sessions=256/nosync", func(b *testing.B) {
		benchAppend(b, Options{NoSync: true}, 256, 32)
	})
}

// BenchmarkAppendSerial is one goroutine: one fsync per append, the cost
// group commit amortises.
func BenchmarkAppendSerial(b *testing.B) {
	benchAppend(b, Options{}, 1, 1)
}

func BenchmarkLoad(b *testing.B) {
	s := openTest(b, Options{NoSync: true})
	ctx := context.Background()
	recs := make([]Record, 1000)
	for i := range recs {
		recs[i] = Record{Role: "user", Content: "the quick brown fox jumps over the lazy dog", MessageID: fmt.Sprint("m-", i)}
	}
	if err := s.Append(ctx, "k", recs...); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Load("k"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
}
