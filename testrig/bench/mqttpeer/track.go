package main

import (
	"math"
	"slices"
	"sync/atomic"
	"time"

	"termlink/testrig/load"
)

// tracker follows every message of a run by its sequence number: when it
// was sent, acked (PUBACK) and answered. The arrays are allocated for the
// run's rate * duration up front: no map, no lock.
type tracker struct {
	sentAt  []atomic.Int64 // unix ns; 0: not sent
	ackNs   []atomic.Int64 // send to PUBACK; 0: not acked
	replyNs []atomic.Int64 // send to reply; 0: not answered

	sent, acked, replied, dupReplies, unknown atomic.Int64
	lastReply                                 atomic.Int64 // unix ns
}

func newTracker(capacity int64) *tracker {
	return &tracker{
		sentAt:  make([]atomic.Int64, capacity),
		ackNs:   make([]atomic.Int64, capacity),
		replyNs: make([]atomic.Int64, capacity),
	}
}

// capacity is how many messages the tracker can follow.
func (t *tracker) capacity() int64 { return int64(len(t.sentAt)) }

// sending records that message n is being written at at.
func (t *tracker) sending(n int64, at time.Time) {
	t.sentAt[n].Store(at.UnixNano())
	t.sent.Add(1)
}

// sendFailed undoes sending: the write failed.
func (t *tracker) sendFailed(n int64) {
	t.sentAt[n].Store(0)
	t.sent.Add(-1)
}

// since returns how long ago (at) message n was sent, false if it was not.
func (t *tracker) since(n int64, at time.Time) (int64, bool) {
	if n < 0 || n >= t.capacity() {
		return 0, false
	}
	s := t.sentAt[n].Load()
	if s == 0 {
		return 0, false
	}
	return max(at.UnixNano()-s, 1), true
}

func (t *tracker) ack(n int64, at time.Time) {
	d, ok := t.since(n, at)
	if !ok {
		t.unknown.Add(1)
		return
	}
	if t.ackNs[n].CompareAndSwap(0, d) {
		t.acked.Add(1)
	}
}

func (t *tracker) reply(n int64, at time.Time) {
	d, ok := t.since(n, at)
	if !ok {
		t.unknown.Add(1)
		return
	}
	if !t.replyNs[n].CompareAndSwap(0, d) {
		t.dupReplies.Add(1)
		return
	}
	t.replied.Add(1)
	for {
		last := t.lastReply.Load()
		if at.UnixNano() <= last || t.lastReply.CompareAndSwap(last, at.UnixNano()) {
			return
		}
	}
}

// outstanding is the messages sent and not yet answered.
func (t *tracker) outstanding() int64 { return t.sent.Load() - t.replied.Load() }

// latency summarises the nonzero durations (ns) of xs, in milliseconds,
// percentiles by the nearest-rank method as termrig load reports them.
func latency(xs []atomic.Int64) load.Latency {
	var s []int64
	for i := range xs {
		if v := xs[i].Load(); v > 0 {
			s = append(s, v)
		}
	}
	if len(s) == 0 {
		return load.Latency{}
	}
	slices.Sort(s)
	pct := func(p float64) float64 {
		rank := min(max(int(math.Ceil(p/100*float64(len(s)))), 1), len(s))
		return ms(time.Duration(s[rank-1]))
	}
	return load.Latency{N: len(s), P50: pct(50), P90: pct(90), P99: pct(99), Max: ms(time.Duration(s[len(s)-1]))}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
