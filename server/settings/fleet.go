package settings

import (
	"fmt"
	"maps"
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
	// SetSettings keeps the settings version (or error) a device's ack
	// said, once the store believed it (Report).
	SetSettings(channelID, peerID string, version int64, errText string) bool
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
// resends its last ack on every connect), and the devices whose pushed
// versions are remembered; past it they are forgotten all at once (an
// ack may then be recorded twice, or refused as not asked).
const maxSeen = 100000

// maxSentVersions is how many of the last versions pushed to a device
// are remembered: its ack of any of them is believed.
const maxSentVersions = 4

// Gate kinds of what a device's ack makes the store write.
const (
	gateRefused = "settings refused by a device"
	gateApplied = "settings applied by a device"
)

// sentLocked remembers that version v was pushed to peer (s.mu held).
func (s *Store) sentLocked(channelID, peerID string, v int64) {
	key := channelID + "\x00" + peerID
	vs := s.sent[key]
	if vs == nil && len(s.sent) >= maxSeen {
		clear(s.sent)
	}
	if slices.Contains(vs, v) {
		return
	}
	if len(vs) >= maxSentVersions {
		vs = slices.Delete(vs, 0, 1)
	}
	s.sent[key] = append(vs, v)
}

// changedLocked records a change made here, at version v and pushed to
// n devices connected here (s.mu held).
func (s *Store) changedLocked(channelID string, v int64, n int, sel Selector, what, by string) {
	detail := fmt.Sprintf("%s: %s by %s (version %d, pushed to %d online)", sel, what, by, v, n)
	s.opt.Log.Info("settings changed", "channel_id", channelID, "document", sel.String(), "change", what, "by", by, "version", v, "pushed", n)
	if s.deps.Event != nil {
		s.deps.Event(channelID, events.Event{Event: EventChanged, PeerID: sel.PeerID, Detail: events.Truncate(detail, events.MaxFieldBytes)})
	}
}

// pushLocked sends its effective settings to every device of the
// channel that listed "settings" and is connected here (s.mu held): the
// online ones of the registry, and those that connected here since the
// store opened (DeviceConnected). In a cluster the registry is every
// node's view, written behind: a device that has just connected here
// may not be in it yet, and a change another node made must still reach
// it. Send refuses the ones connected elsewhere.
func (s *Store) pushLocked(channelID string) int {
	if s.deps.Send == nil {
		return 0
	}
	var peers []registry.Peer
	if s.deps.Registry != nil {
		online := true
		peers = s.deps.Registry.List(channelID, registry.Filter{Online: &online})
	}
	listed := make(map[string]bool, len(peers))
	for _, p := range peers {
		listed[p.PeerID] = true
	}
	for _, id := range slices.Sorted(maps.Keys(s.here[channelID])) {
		if !listed[id] {
			peers = append(peers, registry.Peer{PeerID: id, Tags: s.here[channelID][id], Capabilities: []string{link.CapSettings}})
		}
	}
	n := 0
	for _, p := range peers {
		if !slices.Contains(p.Capabilities, link.CapSettings) {
			continue
		}
		e := s.effectiveLocked(channelID, p.PeerID, p.Tags)
		if s.deps.Send(channelID, p.PeerID, &e.Settings) {
			s.sentLocked(channelID, p.PeerID, e.Settings.Version)
			n++
		} else if !listed[p.PeerID] {
			delete(s.here[channelID], p.PeerID) // gone from here
			s.hereCount--
		}
	}
	return n
}

// connectedLocked remembers a device that connected here with its tags
// (s.mu held), for pushLocked.
func (s *Store) connectedLocked(channelID, peerID string, tags map[string]string) {
	if s.hereCount >= maxSeen {
		clear(s.here)
		s.hereCount = 0
	}
	m := s.here[channelID]
	if m == nil {
		m = map[string]map[string]string{}
		s.here[channelID] = m
	}
	if _, ok := m[peerID]; !ok {
		s.hereCount++
	}
	m[peerID] = maps.Clone(tags)
}

// DeviceConnected (a fleet operation part): a device that listed
// "settings" and says another version than the channel's gets its
// effective settings; every one is remembered as connected here, for
// the pushes of later changes.
func (s *Store) DeviceConnected(channelID string, c *link.Connect) {
	if !slices.Contains(c.Capabilities, link.CapSettings) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.connectedLocked(channelID, c.PeerID, c.Tags)
	ch := s.chans[channelID]
	if ch == nil || ch.Version < 1 || c.SettingsVersion == ch.Version || s.deps.Send == nil {
		return
	}
	e := s.effectiveLocked(channelID, c.PeerID, c.Tags)
	if !s.deps.Send(channelID, c.PeerID, &e.Settings) {
		s.opt.Log.Warn("settings not sent to a device that connected: its fleet queue is full or it is gone", "channel_id", channelID, "peer_id", c.PeerID, "version", ch.Version)
		return
	}
	s.sentLocked(channelID, c.PeerID, e.Settings.Version)
}

// Answers is the answer frame the store takes: settings_ack.
func (s *Store) Answers() link.Type { return link.TypeSettingsAck }

// Report takes a settings_ack (a fleet operation part). A device is
// believed only about what it was asked (issue 36): an ack of a version
// pushed to that device (one of its last maxSentVersions) is recorded,
// once per version and outcome, as an event (through Options.Outside);
// one without an error for the channel's version, of settings that set
// the device's tags, puts those tags in the registry; believed is true
// for it (the registry keeps the device's settings version or error).
// An ack of a version never pushed to it is refused with an error,
// unless it is the resend of an applied version the registry has for it
// already (its connect said it), which changes nothing.
//
// What it believed is kept in the device registry (Registry.SetSettings):
// the settings' rule, not the server's.
func (s *Store) Report(channelID, peerID string, f link.Frame) (believed bool, err error) {
	if believed, err = s.report(channelID, peerID, f); believed && s.deps.Registry != nil {
		ack := f.(*link.SettingsAck)
		s.deps.Registry.SetSettings(channelID, peerID, ack.Version, ack.Error)
	}
	return believed, err
}

func (s *Store) report(channelID, peerID string, f link.Frame) (believed bool, err error) {
	ack, ok := f.(*link.SettingsAck)
	if !ok {
		return false, fmt.Errorf("settings take settings_ack frames, not %s", f.FrameType())
	}
	key := channelID + "\x00" + peerID
	s.mu.Lock()
	asked := slices.Contains(s.sent[key], ack.Version)
	var tags map[string]string
	if c := s.chans[channelID]; asked && ack.Error == "" && c != nil && c.Version == ack.Version {
		if p := c.Peers[peerID]; p != nil {
			tags = p.Tags
		}
	}
	s.mu.Unlock()
	if !asked {
		if ack.Error == "" && s.deps.Registry != nil {
			if p, ok := s.deps.Registry.Get(channelID, peerID); ok && p.SettingsVersion == ack.Version {
				return false, nil // the resend of what it applied: not news
			}
		}
		return false, fmt.Errorf("settings version %d was not sent to this device", ack.Version)
	}
	sig := fmt.Sprintf("%d\x00%s", ack.Version, ack.Error)
	s.seenMu.Lock()
	if s.seen[key] == sig {
		s.seenMu.Unlock()
		return false, nil
	}
	if len(s.seen) >= maxSeen {
		clear(s.seen)
	}
	s.seen[key] = sig
	s.seenMu.Unlock()
	g, src := s.opt.Outside, channelID+"/"+peerID
	if ack.Error != "" {
		detail := fmt.Sprintf("version %d: %s", ack.Version, ack.Error)
		if g.Allow(gateRefused, src, detail) {
			if s.deps.Event != nil {
				s.deps.Event(channelID, events.Event{Event: EventRefused, PeerID: peerID, Detail: g.Field(detail)})
			}
			s.opt.Log.Warn("a device refused pushed settings", "channel_id", channelID, "peer_id", peerID, "version", ack.Version, "err", g.Field(ack.Error))
		}
		return true, nil
	}
	if s.deps.Event != nil && g.Allow(gateApplied, src, fmt.Sprintf("version %d", ack.Version)) {
		s.deps.Event(channelID, events.Event{Event: EventApplied, PeerID: peerID, Detail: fmt.Sprintf("version %d", ack.Version)})
	}
	if tags != nil && s.deps.Registry != nil {
		s.deps.Registry.SetTags(channelID, peerID, tags)
	}
	return true, nil
}
