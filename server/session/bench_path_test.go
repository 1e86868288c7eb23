package session

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The records of one message as termserver's local store writes them
// (record/local): the user message with its run's start (one append,
// Accept), then the reply (one append, Finish).
var (
	benchStarted = map[string]any{"event": "run_started"}
	benchTime    = time.Date(2026, 11, 23, 15, 4, 5, 123456000, time.Local)
)

// benchMsg is one session's records, built once: the caller's strings
// (run id, the start's text, the user's timestamp) are not the store's
// cost.
type benchMsg struct {
	key            string
	accept, finish []Record
}

func newBenchMsg(key, id, text string) benchMsg {
	return benchMsg{key: key,
		accept: []Record{
			{Role: "user", Content: text, MessageID: id, RunID: "run-" + id, Timestamp: benchTime.Format(TimeLayout)},
			{Role: "system", MessageID: id, RunID: "run-" + id, Content: "the run of message " + id + " started", Extra: benchStarted},
		},
		finish: []Record{{Role: "assistant", Content: "You said: " + text, MessageID: id, RunID: "run-" + id, FinishReason: "stop"}},
	}
}

// benchMessage encodes and appends one message's records the way
// record/local's journal does: each append's lines encoded once after
// the write-ahead log's prefix (key, '\n'), the lines then handed to
// AppendEncoded; the log itself is measured in server/wal. recs is
// scratch space (EncodeRecords sets timestamps in it).
func benchMessage(b *testing.B, s *Store, m benchMsg, recs []Record) {
	ctx := context.Background()
	for _, tmpl := range [][]Record{m.accept, m.finish} {
		recs = append(recs[:0], tmpl...)
		payload, err := EncodeRecordsAfter(m.key+"\n", recs)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.AppendEncoded(ctx, m.key, payload[len(m.key)+1:], len(recs)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMessagePath is the session store's share of one message on
// termserver's hot path (WriteBehind, as termserver opens it; no fsync,
// so it measures CPU): encode, append, and the checkpoint's Sync every
// 10,000 messages (a second at 10,000 messages/s), over 1,000 sessions.
// One op is one message (three records in two appends). cpu-ns/op is
// the process's CPU time (user and system, the writer's included) per
// message: on a loaded machine it varies less than ns/op.
func BenchmarkMessagePath(b *testing.B) {
	s := openTest(b, Options{SyncLater: true, WriteBehind: true, NoSync: true})
	const sessions = 1000
	const text = "hello from the desk terminal, what is the weather like"
	msgs := make([]benchMsg, sessions)
	recs := make([]Record, 0, 2)
	for i := range msgs {
		key, id := fmt.Sprintf("terminal-dev:local:dev-%04d", i), fmt.Sprintf("m-%08d", i)
		msgs[i] = newBenchMsg(key, id, text)
		benchMessage(b, s, msgs[i], recs)
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := processCPU()
	n := 0
	for b.Loop() { // the set-up above runs once
		benchMessage(b, s, msgs[n%sessions], recs)
		if n++; n%10000 == 0 {
			if err := s.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(n), "cpu-ns/op")
}

// BenchmarkMessageEncode is the encoding share of BenchmarkMessagePath:
// one message's records (the user message and its start, then the
// reply) encoded after the write-ahead log's prefix, as record/local's
// journal encodes them once for the log and the session file.
func BenchmarkMessageEncode(b *testing.B) {
	m := newBenchMsg("terminal-dev:local:dev-0001", "m-00000001", "hello from the desk terminal, what is the weather like")
	recs := make([]Record, 0, 2)
	b.ReportAllocs()
	for b.Loop() {
		for _, tmpl := range [][]Record{m.accept, m.finish} {
			recs = append(recs[:0], tmpl...)
			if _, err := EncodeRecordsAfter(m.key+"\n", recs); err != nil {
				b.Fatal(err)
			}
		}
	}
}
