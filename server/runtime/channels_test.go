package runtime

import (
	"testing"

	"termlink/server/config"
	"termlink/server/events"
)

// "Does the channel exist" means one thing everywhere: a disabled
// channel exists, has no adapter, and still keeps its events; an
// unknown one has none of these, and adding to its events does nothing.
func TestChannels(t *testing.T) {
	off := &Channel{ID: "off", Events: events.NewLog(8)}
	cs := Channels{"off": off}
	if !cs.Exists("off") || cs.Exists("nope") {
		t.Fatalf("Exists(off)=%v Exists(nope)=%v, want true and false", cs.Exists("off"), cs.Exists("nope"))
	}
	if a := cs.Adapter("off"); a != nil {
		t.Fatalf("a disabled channel's adapter: %v, want nil", a)
	}
	if a := cs.Adapter("nope"); a != nil {
		t.Fatalf("an unknown channel's adapter: %v, want nil", a)
	}
	cs.Event("off", events.Event{Event: "kept"})
	cs.Event("nope", events.Event{Event: "dropped"})
	if got := off.Events.Recent(-1); len(got) != 1 || got[0].Event != "kept" {
		t.Fatalf("the disabled channel's events: %+v, want the one added", got)
	}
}

// A channel's bound on messages waiting per session is its config's,
// else the default.
func TestMaxWaitingPerSession(t *testing.T) {
	ch := &Channel{}
	if n := ch.MaxWaitingPerSession(); n != config.DefaultMaxWaitingPerSession {
		t.Fatalf("unset: %d, want the default %d", n, config.DefaultMaxWaitingPerSession)
	}
	ch.Config.Config.MaxWaitingPerSession = 3
	if n := ch.MaxWaitingPerSession(); n != 3 {
		t.Fatalf("set to 3: %d", n)
	}
}

// The session id is the spec's: channel, account and peer, and the
// thread when there is one.
func TestSessionKey(t *testing.T) {
	if k := SessionKey("terminal-dev", "local", "kiosk", ""); k != "terminal-dev:local:kiosk" {
		t.Fatalf("no thread: %q", k)
	}
	if k := SessionKey("terminal-dev", "local", "kiosk", "t1"); k != "terminal-dev:local:kiosk:t1" {
		t.Fatalf("thread t1: %q", k)
	}
}
