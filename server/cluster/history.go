package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/session"
)

// histEntry is one message of the session history stream: the records of
// one turn (the user message, a run_interrupted record, the reply).
type histEntry struct {
	Session string           `json:"session"`
	Records []session.Record `json:"records"`
}

// recordKey names a record within its session: each role, message id and
// event is written once (the Nats-Msg-Id of a history record, so a
// re-run's second write of the user record is stored once, and the
// export's key for the same check beyond the duplicate window).
func recordKey(sessionKey string, r session.Record) string {
	ev, _ := r.Extra["event"].(string)
	return r.Role + "\x00" + r.MessageID + "\x00" + ev + "\x00" + sessionKey
}

// History is an append in flight: Wait returns when JetStream stored it.
type History struct {
	n        *Node
	subj, id string
	data     []byte
	future   jetstream.PubAckFuture // nil: not sent yet (or nothing to send)
	err      error
}

// Wait waits until JetStream stored the records, publishing them again
// (same Nats-Msg-Id: stored once) while NATS fails, until ctx ends.
func (h *History) Wait(ctx context.Context) error {
	if h == nil || h.err != nil || h.data == nil {
		if h != nil {
			return h.err
		}
		return nil
	}
	if h.future != nil {
		select {
		case <-h.future.Ok():
			return nil
		case <-h.future.Err():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := h.n.js.Publish(actx, h.subj, h.data, jetstream.WithMsgID(h.id))
		cancel()
		if err == nil {
			return nil
		}
		h.n.log.Warn("cluster: session history not stored yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: storing session history: %w", err)
		case <-time.After(wait):
		}
	}
}

// AppendHistory starts storing records of a session in the history
// stream, as one message, and returns without waiting (Wait does).
func (n *Node) AppendHistory(sessionKey string, recs ...session.Record) *History {
	h := &History{n: n}
	if len(recs) == 0 {
		return h
	}
	for i := range recs {
		if recs[i].Timestamp == "" {
			recs[i].Timestamp = session.Now()
		}
	}
	b, err := json.Marshal(histEntry{Session: sessionKey, Records: recs})
	if err != nil {
		h.err = err
		return h
	}
	id := ""
	for _, r := range recs {
		id += recordKey(sessionKey, r) + "\x01"
	}
	h.n, h.subj, h.id, h.data = n, histPrefix+SessionDigest(sessionKey), digest(id), b
	if f, err := n.js.PublishAsync(h.subj, b, jetstream.WithMsgID(h.id)); err == nil {
		h.future = f
	}
	return h
}

// ReadHistory calls fn with every record of the history stream, oldest
// first, each record once (by role, message id and event). An empty
// sessionKey reads every session.
func (n *Node) ReadHistory(ctx context.Context, sessionKey string, fn func(sessionKey string, r session.Record) error) error {
	filter := histPrefix + ">"
	if sessionKey != "" {
		filter = histPrefix + SessionDigest(sessionKey)
	}
	info, err := n.hist.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("cluster: reading %s: %w", HistStream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := n.js.OrderedConsumer(ctx, HistStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return fmt.Errorf("cluster: reading %s: %w", HistStream, err)
	}
	seen := map[string]bool{}
	for {
		batch, err := cons.Fetch(512, jetstream.FetchMaxWait(2*time.Second))
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
			} else {
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
