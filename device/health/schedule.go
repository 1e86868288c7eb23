package health

import (
	"time"

	"termlink/link"
)

// When a report is due, and the thresholds that make one due at once.
const (
	// Interval: a report at most this often when nothing changes.
	Interval = time.Minute
	// MinInterval: the server takes one report per 30 s per connection;
	// a change past a threshold is reported at once, but not sooner
	// than this after the last report on the same connection.
	MinInterval = 30 * time.Second
	// DiskLowPercent: less free space than this on the state dir's file
	// system is "disk low" (the server's mark: link.HealthDiskLowPercent).
	DiskLowPercent = link.HealthDiskLowPercent
	// HotMilliC: a CPU this hot is "hot" (the Raspberry Pi firmware
	// starts its soft throttling at 80 °C by default).
	HotMilliC = link.HealthHotMilliC
)

// Conditions are the thresholds a report crossed.
type Conditions struct {
	DiskLow, Hot, Throttled bool
	Restarts                int
}

// ConditionsOf reads h's conditions.
func ConditionsOf(h link.Health) Conditions {
	return Conditions{
		DiskLow:   h.DiskFreePercent < DiskLowPercent,
		Hot:       h.TempMilliC != nil && *h.TempMilliC >= HotMilliC,
		Throttled: ThrottledNow(h.Throttled),
		Restarts:  h.RestartsLastHour,
	}
}

// Schedule decides when a report is due: at once on a new connection;
// on a change of the conditions once MinInterval passed since the last
// report on this connection; else every Interval. The zero Schedule has
// sent nothing.
type Schedule struct {
	sent     bool
	at       time.Time
	session  int64 // the client's Sessions when it was sent
	reported Conditions
}

// Due reports whether a report with conditions c is due now, on the
// client's session'th connection.
func (s *Schedule) Due(now time.Time, session int64, c Conditions) bool {
	switch {
	case !s.sent || session != s.session:
		return true
	case now.Sub(s.at) < MinInterval:
		return false
	case c != s.reported:
		return true
	default:
		return now.Sub(s.at) >= Interval
	}
}

// Sent records a report sent now on session with conditions c.
func (s *Schedule) Sent(now time.Time, session int64, c Conditions) {
	s.sent, s.at, s.session, s.reported = true, now, session, c
}
