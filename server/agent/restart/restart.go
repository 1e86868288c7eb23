// Package restart keeps the restart delays of long-lived agent processes
// (the Nuum and ACP runners' one process per session): after a crash the
// session's next process waits, about Min after the first crash, doubling
// with every crash in a row up to Max, each delay jittered so that agents
// that crashed together do not restart together.
package restart

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Jitter is the randomization factor of the delays.
const Jitter = 0.5

// Tracker holds the crashes in a row of each session key. It is not safe
// for concurrent use: callers hold their own lock.
type Tracker struct {
	min, max time.Duration
	crashes  map[string]*record
}

type record struct {
	backoff *backoff.ExponentialBackOff // the delays of crashes in a row
	until   time.Time                   // no restart before
	n       int                         // crashes in a row
}

// New returns a tracker whose delays stay within [lo, hi] (hi below lo is
// taken as lo).
func New(lo, hi time.Duration) *Tracker {
	return &Tracker{min: lo, max: max(lo, hi), crashes: map[string]*record{}}
}

// newBackoff returns the delays after crashes in a row: doubling, each
// randomized by ±Jitter, and always within [min, max]. The intervals are
// placed so that the randomized values span the bounds: the first in
// [min, 3*min], the last in [max/3, max] (cenkalti's randomized value is
// interval*(1±factor)).
func (t *Tracker) newBackoff() *backoff.ExponentialBackOff {
	initial := time.Duration(float64(t.min) / (1 - Jitter))
	maxInterval := max(time.Duration(float64(t.max)/(1+Jitter)), initial)
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(initial),
		backoff.WithMaxInterval(maxInterval),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(Jitter),
		backoff.WithMaxElapsedTime(0), // never gives up
	)
}

func (t *Tracker) next(r *record) time.Duration {
	return min(max(r.backoff.NextBackOff(), t.min), t.max)
}

// Crashed records a crash of key's process at now and returns the delay
// before its next start. Keys whose wait ended long ago are forgotten.
func (t *Tracker) Crashed(key string, now time.Time) time.Duration {
	for k, r := range t.crashes {
		if now.Sub(r.until) > 10*t.max {
			delete(t.crashes, k)
		}
	}
	r := t.crashes[key]
	if r == nil {
		r = &record{backoff: t.newBackoff()}
		t.crashes[key] = r
	}
	d := t.next(r)
	r.until = now.Add(d)
	r.n++
	return d
}

// Crashes is how many crashes in a row key has had since its last Reset.
func (t *Tracker) Crashes(key string) int {
	if r := t.crashes[key]; r != nil {
		return r.n
	}
	return 0
}

// Wait is how long key must wait before its process may be started.
func (t *Tracker) Wait(key string) time.Duration {
	if r := t.crashes[key]; r != nil {
		return time.Until(r.until)
	}
	return 0
}

// Reset forgets key's crashes: its agent works.
func (t *Tracker) Reset(key string) { delete(t.crashes, key) }
