package events

import "termlink/server/fanout"

// Subscribe streams every event added from now on, in order, to a
// subscriber that may fall buf events behind; one that falls further is
// dropped (its Done closes), never slowing Add. Close it when done.
func (l *Log) Subscribe(buf int) *fanout.Sub[Event] { return l.live.Subscribe(buf) }
