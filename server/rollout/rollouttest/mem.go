// Package rollouttest holds what the tests of package rollout's storages
// share: the contract suite every rollout.Storage passes (Run), a
// shared store in memory (Mem: the cluster's semantics without NATS,
// for tests in a synctest bubble) and a fleet spread over nodes (Fleet).
package rollouttest

import (
	"bytes"
	"context"
	"sync"

	"termlink/server/rollout"
)

// Mem is a rollout store in memory shared by its handles (Handle), as
// the cluster's bucket is by the nodes: each handle's Follow brings
// every write, its own too, as a KV watch does.
type Mem struct {
	mu       sync.Mutex
	recs     map[string][]byte
	revs     map[string]uint64
	seq      uint64
	holder   string
	leaseRev uint64
	subs     map[*memSub]bool
	// MaxRecords is the handles' Info().MaxRecords.
	MaxRecords int
}

type memSub struct {
	mu    sync.Mutex
	queue []memChange
	kick  chan struct{}
}

type memChange struct {
	id    string
	value []byte
	rev   uint64
	gone  bool
}

// NewMem returns an empty store.
func NewMem() *Mem {
	return &Mem{recs: map[string][]byte{}, revs: map[string]uint64{}, subs: map[*memSub]bool{}}
}

// Handle is a node's handle on the store.
func (m *Mem) Handle() rollout.Storage { return memHandle{m} }

func (m *Mem) publishLocked(c memChange) {
	for s := range m.subs {
		s.mu.Lock()
		s.queue = append(s.queue, c)
		s.mu.Unlock()
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

type memHandle struct{ m *Mem }

func (h memHandle) Follow(ctx context.Context, f rollout.Feed) error {
	m := h.m
	s := &memSub{kick: make(chan struct{}, 1)}
	m.mu.Lock()
	var first []memChange
	for id, v := range m.recs {
		first = append(first, memChange{id: id, value: bytes.Clone(v), rev: m.revs[id]})
	}
	m.subs[s] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.subs, s)
		m.mu.Unlock()
	}()
	for _, c := range first {
		f.Put(c.id, c.value, c.rev)
	}
	f.Loaded()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		}
		s.mu.Lock()
		q := s.queue
		s.queue = nil
		s.mu.Unlock()
		for _, c := range q {
			if c.gone {
				f.Gone(c.id, c.rev)
			} else {
				f.Put(c.id, c.value, c.rev)
			}
		}
	}
}

func (h memHandle) Get(_ context.Context, id string) ([]byte, uint64, error) {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return bytes.Clone(h.m.recs[id]), h.m.revs[id], nil
}

func (h memHandle) Put(_ context.Context, id string, value []byte, rev uint64) (uint64, error) {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revs[id] != rev {
		return 0, rollout.ErrConflict
	}
	m.seq++
	m.recs[id], m.revs[id] = bytes.Clone(value), m.seq
	m.publishLocked(memChange{id: id, value: bytes.Clone(value), rev: m.seq})
	return m.seq, nil
}

func (h memHandle) Delete(_ context.Context, id string, rev uint64) error {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revs[id] == 0 {
		return nil
	}
	if m.revs[id] != rev {
		return rollout.ErrConflict
	}
	m.seq++
	delete(m.recs, id)
	delete(m.revs, id)
	m.publishLocked(memChange{id: id, rev: m.seq, gone: true})
	return nil
}

func (h memHandle) Lease(context.Context) (string, uint64, error) {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.m.holder, h.m.leaseRev, nil
}

func (h memHandle) TakeLease(_ context.Context, holder string, rev uint64) (uint64, error) {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leaseRev != rev {
		return 0, rollout.ErrConflict
	}
	m.seq++
	m.holder, m.leaseRev = holder, m.seq
	return m.seq, nil
}

func (h memHandle) Info() rollout.StorageInfo {
	return rollout.StorageInfo{Shared: true, MaxRecordBytes: 1 << 20, MaxRecords: h.m.MaxRecords}
}

func (h memHandle) Where(id string) string { return "memory record " + id }

func (h memHandle) Close() error { return nil }
