package cluster

import "time"

// leaseWake is when a worker's loop ticks next. It ticks every lease/3
// to renew its leases; when another worker's lease is due to expire
// sooner (its entry in the nodes bucket, or a partition lease it held:
// both leave by the buckets' TTL, a lease after they were last written),
// it ticks just after that instead, so a dead worker's partitions are
// taken as soon as its leases are gone, not up to lease/3 later.
//
// The expiry is read from the age of the entry (the NATS server's write
// time): a clock of the server's far off ours makes entries look
// renewed or long expired, and those are left to the regular tick.
type leaseWake struct {
	lease time.Duration
	now   time.Time
	at    time.Time // the soonest expiry seen (plus expiryMargin); zero: none
}

// parallelStarts is how many partitions a tick starts consuming side
// by side (tick waits for them).
const parallelStarts = 8

// expiryMargin is how long after an entry's expiry the loop looks: the
// NATS server removes expired messages on a timer of its own (at least
// 250 ms apart, at the next message's expiry).
const expiryMargin = 100 * time.Millisecond

// expires notes an entry another worker wrote age ago.
func (l *leaseWake) expires(age time.Duration) {
	left := l.lease - age
	if left > l.lease || left <= -l.lease/3 {
		return // written "in the future", or long expired: a clock is off
	}
	at := l.now.Add(max(left, 0) + expiryMargin)
	if l.at.IsZero() || at.Before(l.at) {
		l.at = at
	}
}

// next is when to tick: at regular, or at the soonest expiry seen if
// that comes first.
func (l *leaseWake) next(regular time.Time) time.Time {
	if !l.at.IsZero() && l.at.Before(regular) {
		return l.at
	}
	return regular
}
