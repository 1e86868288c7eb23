package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/record"
	"termlink/server/record/recordtest"
	"termlink/server/session"
)

// The store of record's contract on JetStream (an embedded NATS): each
// handle is a new node, edge and worker at once, under a name of its
// own, opened once the one before it is closed (its partitions given
// up): the new worker takes what the old one held.
func TestContract(t *testing.T) {
	recordtest.Run(t, func(t *testing.T) recordtest.Store {
		url := startJetStream(t)
		cfg := func(name string) config.Cluster {
			return config.Cluster{NATS: []string{url}, Role: config.RoleAll, Name: name, Partitions: 1, Replicas: 1,
				AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
		}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		handles := 0
		return recordtest.Store{
			Open: func(t *testing.T, q *recordtest.Queue) record.Parts {
				handles++
				name := fmt.Sprintf("n%d", handles)
				s, err := OpenStore(cfg(name), contractHost{q}, StoreOptions{Logger: log, Process: name})
				if err != nil {
					t.Fatal(err)
				}
				return record.Parts{Store: s, Edge: s, Lifecycle: s, Status: s}
			},
			History: func(t *testing.T, key string) []session.Record {
				ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
				defer cancel()
				n, err := OpenReader(ctx, cfg("reader"), log)
				if err != nil {
					t.Fatal(err)
				}
				defer n.Close()
				var recs []session.Record
				if err := n.ReadHistory(ctx, key, func(_ string, r session.Record) error {
					recs = append(recs, r)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return recs
			},
		}
	})
}

// contractHost is the contract's queue as the cluster's Host: no other
// edge takes a peer over, and a reply no edge took is the device's to
// fetch by resending (the contract checks that).
type contractHost struct{ *recordtest.Queue }

func (contractHost) ReplaceElsewhere(channel, peer, edge string) {}
func (contractHost) Unclaimed(bus.Outbound, string)              {}
