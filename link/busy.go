package link

import "fmt"

// Busy (issue 42, extension): a device that listed "update" says whether
// a person is using it, so that a rollout does not restart it in the
// middle of a conversation.
//
//	busy  device -> server   whether the device is in use now, and why
//
// The device sends one right after each connect (its state then: the
// server takes a device that has not said so yet for idle), and one on
// each change, at most one a second. Why is one of BusyRun (a message
// sent and not yet replied), BusyQuestion (a question open on the glass)
// or BusyKeys (a key pressed in the last busy_seconds); empty when Busy is
// false. UTCOffset, when the device knows its zone, is its offset east of
// UTC in seconds now: a rollout's window in the devices' zone is read in
// it.
const TypeBusy Type = "busy"

// Why a device is busy.
const (
	BusyRun      = "run"
	BusyQuestion = "question"
	BusyKeys     = "keys"
)

// MaxUTCOffset bounds Busy.UTCOffset: 14 hours either way (UTC-12 to
// UTC+14 are the zones in use).
const MaxUTCOffset = 14 * 60 * 60

// Busy (extension) is whether the device is in use now.
type Busy struct {
	Busy      bool   `json:"busy"`
	Why       string `json:"why,omitempty"`
	UTCOffset *int   `json:"utc_offset,omitempty"`
}

func (*Busy) FrameType() Type { return TypeBusy }

// busyProblem checks a decoded busy frame (fleetProblem's case).
func busyProblem(f *Busy) (field, msg string) {
	switch {
	case f.Busy && f.Why != BusyRun && f.Why != BusyQuestion && f.Why != BusyKeys:
		return "why", fmt.Sprintf("must be %q, %q or %q when busy; got %q", BusyRun, BusyQuestion, BusyKeys, cutForError(f.Why))
	case !f.Busy && f.Why != "":
		return "why", fmt.Sprintf("must be empty when not busy; got %q", cutForError(f.Why))
	case f.UTCOffset != nil && (*f.UTCOffset < -MaxUTCOffset || *f.UTCOffset > MaxUTCOffset):
		return "utc_offset", fmt.Sprintf("must be from %d to %d seconds, got %d", -MaxUTCOffset, MaxUTCOffset, *f.UTCOffset)
	}
	return "", ""
}

// cutForError keeps an error's quote of a device's word short.
func cutForError(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
