package runtime

import (
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/identity"
	"termlink/server/wschannel"
)

// Channel is the runtime's view of one configured channel.
type Channel struct {
	ID       string
	Config   config.Channel
	Events   *events.Log
	Adapter  wschannel.Adapter // nil when disabled
	Bindings identity.Bindings // device tokens learnt (package identity)
}

// MaxWaitingPerSession is the channel's bound on messages waiting in one
// session.
func (ch *Channel) MaxWaitingPerSession() int {
	if n := ch.Config.Config.MaxWaitingPerSession; n > 0 {
		return n
	}
	return config.DefaultMaxWaitingPerSession
}

// Channels are the configured channels by id, and what the capabilities
// ask of them: whether one exists, its live adapter (enabled), adding to
// its event log. "Does the channel exist" means one thing everywhere.
type Channels map[string]*Channel

// Exists reports whether id is configured (enabled or not).
func (cs Channels) Exists(id string) bool { return cs[id] != nil }

// Adapter is id's adapter: nil when id is not configured or disabled.
func (cs Channels) Adapter(id string) wschannel.Adapter {
	if ch := cs[id]; ch != nil && ch.Adapter != nil {
		return ch.Adapter
	}
	return nil
}

// Event adds e to id's event log (none when id is not configured).
func (cs Channels) Event(id string, e events.Event) {
	if ch := cs[id]; ch != nil {
		ch.Events.Add(e)
	}
}
