package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/session"
)

// The history reads both formats in stream order: a turn of the format
// before claims moved into the history (one message on the session's
// subject) and the done claims after it; a claim not done yet, and
// another session's, are not read.
func TestReadHistoryBothFormats(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	n, err := Open(ctx, config.Cluster{NATS: []string{startJetStream(t)}, Role: config.RoleAll, Name: "w1", Partitions: 1,
		Replicas: 1, AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	n.histWait = 50 * time.Millisecond // a read of a session without a turn ends after one such wait
	const key = "terminal-dev:direct:dev-1"
	old, _ := json.Marshal(histEntry{Session: key, Records: []session.Record{
		{Role: "user", MessageID: "m-0", Content: "before"}, {Role: "assistant", MessageID: "m-0", Content: "old"}}})
	if _, err := n.js.Publish(ctx, histPrefix+SessionDigest(key), old); err != nil {
		t.Fatal(err)
	}
	turn := func(id string) []session.Record {
		return []session.Record{{Role: "user", MessageID: id, Content: "q"}, {Role: "assistant", MessageID: id, Content: "a"}}
	}
	if _, err := n.UpdateClaim(ctx, Claim{State: StateDone, Session: key, MessageID: "m-1", Reply: &Reply{Text: "a"}, Records: turn("m-1")}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := n.UpdateClaim(ctx, Claim{State: StateRunning, Session: key, MessageID: "m-2", Worker: "w", Attempt: 1}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := n.UpdateClaim(ctx, Claim{State: StateDone, Session: "other", MessageID: "m-9", Reply: &Reply{Text: "a"}, Records: turn("m-9")}, 0); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := n.ReadHistory(ctx, key, func(k string, r session.Record) error {
		got = append(got, r.Role+" "+r.MessageID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := "user m-0,assistant m-0,user m-1,assistant m-1"
	if strings.Join(got, ",") != want {
		t.Errorf("history %v, want %s", got, want)
	}
	// A session without a turn reads nothing, and returns.
	got = nil
	if err := n.ReadHistory(ctx, "nobody", func(string, session.Record) error { got = append(got, "x"); return nil }); err != nil || got != nil {
		t.Errorf("a session without a turn: %v %v, want nothing", got, err)
	}
	sessions, records, err := n.ExportSessions(ctx, t.TempDir())
	if err != nil || sessions != 2 || records != 6 {
		t.Errorf("export: %d sessions %d records %v, want 2 and 6", sessions, records, err)
	}
}
