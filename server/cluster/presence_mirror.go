package cluster

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// presenceMirror is a worker's copy of the presence bucket, kept by a
// watch: a reply finds its peer's edge without a read on the message's
// path. It lags a connect by the watch's delivery (milliseconds); a
// reply sent to the edge the peer just left is found by the device's
// resend or the new edge's sweep, as a lost reply is.
type presenceMirror struct {
	mu    sync.RWMutex
	ready bool              // the watch has delivered the bucket's contents
	edges map[string]string // presence key -> edge
}

// MirrorPresence keeps a copy of the presence bucket in memory until
// Close (SendOut reads it); the watch is set up again after a failure.
func (n *Node) MirrorPresence() {
	m := &presenceMirror{edges: map[string]string{}}
	n.mirror.Store(m)
	n.Go(func(ctx context.Context) {
		for ctx.Err() == nil {
			w, err := watchKV(ctx, n.presence, nil)
			if err != nil {
				n.log.Warn("cluster: cannot watch presence; replies read it meanwhile; retrying", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			m.follow(w.Updates())
			_ = w.Stop()
		}
	})
}

// follow applies a watch's entries until it ends: first the bucket's
// contents (then a nil entry), then each change.
func (m *presenceMirror) follow(updates <-chan jetstream.KeyValueEntry) {
	fresh := map[string]string{}
	initial := true
	for e := range updates {
		if e == nil {
			m.mu.Lock()
			m.edges, m.ready = fresh, true
			m.mu.Unlock()
			initial = false
			continue
		}
		edges := fresh
		if !initial {
			m.mu.Lock()
			edges = m.edges
		}
		var p presence
		if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &p) == nil && p.Edge != "" {
			edges[e.Key()] = p.Edge
		} else {
			delete(edges, e.Key())
		}
		if !initial {
			m.mu.Unlock()
		}
	}
	m.mu.Lock()
	m.ready = false // read the bucket until the watch is back
	m.mu.Unlock()
}

// lookup is the edge that holds the peer by the mirror; ok false when
// the mirror is not following the bucket, or has no entry (the caller
// reads the bucket).
func (m *presenceMirror) lookup(key string) (edge string, ok bool) {
	if m == nil {
		return "", false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.ready {
		return "", false
	}
	edge, ok = m.edges[key]
	return edge, ok
}
