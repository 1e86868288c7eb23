package settings

import (
	"fmt"
	"slices"

	"termlink/link"
	"termlink/server/events"
	"termlink/server/registry"
)

// Event names of pushed settings (in the channel's events).
const (
	EventChanged = "settings_changed" // a document set or deleted by an operator
	EventApplied = "settings_applied" // a device acked a version
	EventRefused = "settings_refused" // a device refused a version (the reason in detail)
)

// Registry is what the store reads of the device registry, and the one
// thing it writes there: the tags pushed settings gave a device.
type Registry interface {
	Get(channelID, peerID string) (registry.Peer, bool)
	List(channelID string, f registry.Filter) []registry.Peer
	SetTags(channelID, peerID string, tags map[string]string) bool
}

// Deps are the server's parts the store uses.
type Deps struct {
	Registry Registry
	// Send hands a frame to the peer's live connection on this server
	// (Runtime.SendFleet); false when it is not connected here or did not
	// list "settings".
	Send func(channelID, peerID string, f link.Frame) bool
	// Event adds an event to a channel's log.
	Event func(channelID string, e events.Event)
	// Channel reports whether a channel is configured (the API's 404).
	Channel func(channelID string) bool
}

// maxSeen bounds the acks remembered to record each once (the device
// resends its last ack on every connect); past it they are forgotten all
// at once (an ack may then be recorded twice).
const maxSeen = 100000

// changedLocked records a change and pushes the channel's new version to
// its online devices (s.mu held); it returns how many were sent it.
func (s *Store) changedLocked(channelID string, sel Selector, what, by string) int {
	n := s.pushLocked(channelID)
	v := s.chans[channelID].Version
	detail := fmt.Sprintf("%s: %s by %s (version %d, pushed to %d online)", sel, what, by, v, n)
	s.opt.Log.Info("settings changed", "channel_id", channelID, "document", sel.String(), "change", what, "by", by, "version", v, "pushed", n)
	if s.deps.Event != nil {
		s.deps.Event(channelID, events.Event{Event: EventChanged, PeerID: sel.PeerID, Detail: events.Truncate(detail, events.MaxFieldBytes)})
	}
	return n
}

// pushLocked sends every online device of the channel that listed
// "settings" its effective settings (s.mu held).
func (s *Store) pushLocked(channelID string) int {
	if s.deps.Registry == nil || s.deps.Send == nil {
		return 0
	}
	online := true
	n := 0
	for _, p := range s.deps.Registry.List(channelID, registry.Filter{Online: &online}) {
		if !slices.Contains(p.Capabilities, link.CapSettings) {
			continue
		}
		e := s.effectiveLocked(channelID, p.PeerID, p.Tags)
		if s.deps.Send(channelID, p.PeerID, &e.Settings) {
			n++
		}
	}
	return n
}

// DeviceConnected implements wschannel.Fleet: a device that listed
// "settings" and says another version than the channel's gets its
// effective settings.
func (s *Store) DeviceConnected(channelID string, c *link.Connect) {
	if !slices.Contains(c.Capabilities, link.CapSettings) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chans[channelID]
	if ch == nil || ch.Version < 1 || c.SettingsVersion == ch.Version || s.deps.Send == nil {
		return
	}
	e := s.effectiveLocked(channelID, c.PeerID, c.Tags)
	if !s.deps.Send(channelID, c.PeerID, &e.Settings) {
		s.opt.Log.Warn("settings not sent to a device that connected: its fleet queue is full or it is gone", "channel_id", channelID, "peer_id", c.PeerID, "version", ch.Version)
	}
}

// Report implements wschannel.Fleet: a settings_ack is recorded (once
// per version and outcome) as an event; one without an error for the
// channel's version, of settings that set the device's tags, puts those
// tags in the registry.
func (s *Store) Report(channelID, peerID string, f link.Frame) {
	ack, ok := f.(*link.SettingsAck)
	if !ok {
		return
	}
	key, sig := channelID+"\x00"+peerID, fmt.Sprintf("%d\x00%s", ack.Version, ack.Error)
	s.seenMu.Lock()
	if s.seen[key] == sig {
		s.seenMu.Unlock()
		return
	}
	if len(s.seen) >= maxSeen {
		clear(s.seen)
	}
	s.seen[key] = sig
	s.seenMu.Unlock()
	if s.deps.Event != nil {
		e := events.Event{Event: EventApplied, PeerID: peerID, Detail: fmt.Sprintf("version %d", ack.Version)}
		if ack.Error != "" {
			e.Event, e.Detail = EventRefused, events.Truncate(fmt.Sprintf("version %d: %s", ack.Version, ack.Error), events.MaxFieldBytes)
		}
		s.deps.Event(channelID, e)
	}
	if ack.Error != "" {
		s.opt.Log.Warn("a device refused pushed settings", "channel_id", channelID, "peer_id", peerID, "version", ack.Version, "err", ack.Error)
		return
	}
	s.mu.Lock()
	var tags map[string]string
	if c := s.chans[channelID]; c != nil && c.Version == ack.Version {
		if p := c.Peers[peerID]; p != nil {
			tags = p.Tags
		}
	}
	s.mu.Unlock()
	if tags != nil && s.deps.Registry != nil {
		s.deps.Registry.SetTags(channelID, peerID, tags)
	}
}
