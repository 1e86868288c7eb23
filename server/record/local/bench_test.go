package local

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"termlink/server/session"
	"termlink/server/wal"
)

// BenchmarkJournalAppend is the journal's append path (the write-ahead
// log without fdatasync, then the session store) from many goroutines
// over 1,000 sessions: the session files written at once (one write per
// file per batch, the writer goroutine's handoff) or written behind (kept
// in memory; the checkpoint and the pending bound write them).
func BenchmarkJournalAppend(b *testing.B) {
	for _, wb := range []bool{false, true} {
		b.Run(fmt.Sprintf("writebehind=%v", wb), func(b *testing.B) {
			dir := b.TempDir()
			store, err := session.Open(filepath.Join(dir, "sessions"), session.Options{NoSync: true, SyncLater: true, WriteBehind: wb, Logger: quietLog()})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			j, err := openJournal(filepath.Join(dir, "wal"), wal.Options{NoSync: true}, store, quietLog(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer j.close()
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					key := fmt.Sprintf("terminal-dev:local:bench-%d", i%1000)
					rec := []session.Record{{Role: "user", Content: "hello from the bench", MessageID: fmt.Sprint(i), RunID: "run-1"}}
					if err := j.append(context.Background(), key, rec); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
