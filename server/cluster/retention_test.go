package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/config"
	"termlink/server/session"
)

// The history's retention lands on the stream when it is made, and on a
// stream that exists when a node opens with other settings; JetStream
// then drops the oldest records past the byte limit.
func TestHistoryRetention(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	url := startJetStream(t)
	cfg := config.Cluster{NATS: []string{url}, Role: config.RoleWorker, Name: "w1", Partitions: 1,
		Replicas: 1, AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
	open := func(cfg config.Cluster) *Node {
		t.Helper()
		n, err := Open(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := open(cfg) // no limits
	info, err := n.hist.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 0 || info.Config.MaxBytes != -1 {
		t.Errorf("without limits: MaxAge %s MaxBytes %d, want none", info.Config.MaxAge, info.Config.MaxBytes)
	}
	n.Close()

	cfg.HistoryMaxAge, cfg.HistoryMaxBytes = 48*time.Hour, 64<<10
	n = open(cfg)
	defer n.Close()
	if info, err = n.hist.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAge != 48*time.Hour || info.Config.MaxBytes != 64<<10 {
		t.Errorf("reopened with limits: MaxAge %s MaxBytes %d, want 48h and %d", info.Config.MaxAge, info.Config.MaxBytes, 64<<10)
	}

	text := strings.Repeat("x", 1000)
	for i := range 200 { // ~200 KB: about two thirds are dropped
		key := fmt.Sprintf("s-%03d", i)
		done := Claim{State: StateDone, Session: key, MessageID: "m", Reply: &Reply{Text: "ok"},
			Records: []session.Record{{Role: "user", MessageID: "m", Content: text}}}
		if _, err := n.UpdateClaim(ctx, done, 0); err != nil {
			t.Fatal(err)
		}
	}
	if info, err = n.hist.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if info.State.Bytes > 64<<10 || info.State.FirstSeq <= 1 {
		t.Errorf("history holds %d bytes from seq %d, want at most %d, the oldest dropped", info.State.Bytes, info.State.FirstSeq, 64<<10)
	}
	seen := map[string]bool{}
	if err := n.ReadHistory(ctx, "", func(key string, _ session.Record) error { seen[key] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if seen["s-000"] || !seen["s-199"] {
		t.Errorf("sessions read after retention: first kept %v, last kept %v; want the first dropped, the last kept", seen["s-000"], seen["s-199"])
	}
}

// A byte limit the NATS servers cannot reserve is refused with what to
// change.
func TestHistoryRetentionTooLarge(t *testing.T) {
	t.Parallel()
	// Open tries again until its context ends (JetStream may not be
	// ready); JetStream's refusal, logged, ends the context at once, and
	// Open returns it.
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	log := slog.New(slog.NewTextHandler(cancelOn{"insufficient storage", cancel}, nil))
	cfg := config.Cluster{NATS: []string{startJetStream(t)}, Role: config.RoleWorker, Name: "w1", Partitions: 1,
		Replicas: 1, AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour,
		HistoryMaxBytes: 1 << 60}
	n, err := Open(ctx, cfg, log)
	if err == nil {
		n.Close()
		t.Fatal("a history limit larger than any disk was accepted")
	}
	if !strings.Contains(err.Error(), "cluster.historyMaxMegabytes") || !strings.Contains(err.Error(), "max_file_store") {
		t.Errorf("error %q does not say what to change", err)
	}
}

// cancelOn is a log that calls cancel when a line holds what.
type cancelOn struct {
	what   string
	cancel context.CancelFunc
}

func (c cancelOn) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.what) {
		c.cancel()
	}
	return len(p), nil
}

// histStreamConfig keeps the duplicate window within the age limit.
func TestHistStreamConfig(t *testing.T) {
	t.Parallel()
	sc := histStreamConfig(config.Cluster{Replicas: 3, DuplicateWindow: 2 * time.Hour, HistoryMaxAge: time.Hour, HistoryMaxBytes: 1 << 30})
	if sc.MaxAge != time.Hour || sc.Duplicates != time.Hour || sc.MaxBytes != 1<<30 || sc.Replicas != 3 {
		t.Errorf("config %+v", sc)
	}
}
