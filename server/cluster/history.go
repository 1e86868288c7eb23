package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/session"
)

// histEntry is what ReadHistory takes from one message of the history
// stream: a done claim's turn, or an entry of the format before the
// claims moved into the history (one message per turn on the session's
// subject, without a state). A claim not done yet has no turn.
type histEntry struct {
	State   string           `json:"state,omitempty"`
	Session string           `json:"session"`
	Records []session.Record `json:"records"`
}

// recordKey names a record within its session: each role, message id and
// event is read once (a turn written again, by the format before this
// one, or after a partition moved, is not read twice).
func recordKey(sessionKey string, r session.Record) string {
	ev, _ := r.Extra["event"].(string)
	return r.Role + "\x00" + r.MessageID + "\x00" + ev + "\x00" + sessionKey
}

// histFetchWait is how long ReadHistory waits for a batch: one that does
// not come ends the read when nothing matching is left (a session
// without a turn).
const histFetchWait = 2 * time.Second

// ReadHistory calls fn with every record of the history stream, oldest
// first, each record once (by role, message id and event). An empty
// sessionKey reads every session.
func (n *Node) ReadHistory(ctx context.Context, sessionKey string, fn func(sessionKey string, r session.Record) error) error {
	filters := []string{histPrefix + ">"}
	if sessionKey != "" {
		d := SessionDigest(sessionKey)
		filters = []string{histPrefix + d, histPrefix + d + ".>"} // the earlier format, the claims
	}
	info, err := n.hist.Info(ctx)
	if err != nil {
		return fmt.Errorf("cluster: reading %s: %w", HistStream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := n.js.OrderedConsumer(ctx, HistStream, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	if err != nil {
		return fmt.Errorf("cluster: reading %s: %w", HistStream, err)
	}
	seen := map[string]bool{}
	for {
		batch, err := cons.Fetch(512, jetstream.FetchMaxWait(n.histWait))
		if err != nil {
			return fmt.Errorf("cluster: reading %s: %w", HistStream, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			if e, err := decodeHist(m.Data()); err != nil {
				n.log.Warn("cluster: skipping a bad history message", "seq", md.Sequence.Stream, "err", err)
			} else if e.State == "" || e.State == StateDone {
				for _, r := range e.Records {
					if k := recordKey(e.Session, r); !seen[k] {
						seen[k] = true
						if err := fn(e.Session, r); err != nil {
							return err
						}
					}
				}
			}
			if md.Sequence.Stream >= last || md.NumPending == 0 {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("cluster: reading %s: %w", HistStream, err)
		}
		if got == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			// Nothing came: done if nothing matches the filter past
			// what was read (a session without a turn).
			if ci, err := cons.Info(ctx); err == nil && ci.NumPending == 0 {
				return nil
			}
		}
	}
}

// ExportSessions writes the history of every session as nanobot JSONL
// files in dir (the layout of workspace/sessions, package session).
func (n *Node) ExportSessions(ctx context.Context, dir string) (sessions, records int, err error) {
	store, err := session.Open(dir, session.Options{})
	if err != nil {
		return 0, 0, fmt.Errorf("export: opening %s: %w", dir, err)
	}
	defer store.Close()
	seen := map[string]bool{}
	err = n.ReadHistory(ctx, "", func(key string, r session.Record) error {
		if !seen[key] {
			seen[key] = true
			sessions++
		}
		records++
		if err := store.Append(ctx, key, r); err != nil {
			return fmt.Errorf("export: writing session %s: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return sessions, records, err
	}
	return sessions, records, store.Sync()
}
