package rollout

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"termlink/link"
	"termlink/release"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/registry"
	"termlink/server/releases"
)

// Devices is the device registry as a rollout reads it.
type Devices interface {
	Get(channelID, peerID string) (registry.Peer, bool)
	List(channelID string, f registry.Filter) []registry.Peer
	// SetUpdate keeps a device's update state the rollouts believed
	// (Report).
	SetUpdate(channelID, peerID string, u registry.UpdateState) bool
	// SetBusy keeps whether a device is in use (its busy frame: the
	// Busy part); false when it is not online.
	SetBusy(channelID, peerID string, b registry.BusyState) bool
}

// Releases is the release store as a rollout reads it.
type Releases interface {
	// Ready is nil once the releases are loaded (a cluster node's load
	// in the background); until then no rollout starts and none sends.
	Ready() error
	List(version string) []releases.Entry
	Manifest(version, platform string) (*release.Manifest, bool)
}

// Options configure a Manager.
type Options struct {
	Dir      string   // where the rollouts are kept (workspace/rollouts)
	Channels []string // the channels a rollout may name
	Devices  Devices
	Releases Releases
	// Send queues an update frame on the peer's live connection (the
	// runtime's SendFleet); false when it is not connected here or did
	// not list "update".
	Send func(channelID, peerID string, f link.Frame) bool
	// Event adds an event to a channel's log.
	Event func(channelID string, e events.Event)
	// URL is the path (or URL) a device downloads a release's binary
	// from (the devices' download route).
	URL func(channelID, version, platform string) string
	// Tick is how often offline devices are looked for, waiting ones
	// tried again (a window opened), waves advanced and device reports
	// written (default 1 s).
	Tick        time.Duration
	MaxRollouts int // default DefaultMaxRollouts
	MaxDevices  int // default DefaultMaxDevices
	NoSync      bool
	Now         func() time.Time
	Log         *slog.Logger
	// Node names this process as the lease's holder (a shared Storage:
	// the cluster node's name).
	Node string
	// Lease is how long the controller's lease holds unrenewed (a
	// shared Storage; default 5 s): the holder renews it every Lease/3
	// and stops advancing rollouts past 2/3 of it unrenewed; another
	// node takes it once it saw it unchanged for a whole Lease.
	Lease time.Duration
}

// Error is a refusal, with the HTTP status the API answers it with.
type Error = httpapi.StatusError

var refuse = httpapi.Refuse

func (m *Manager) now() time.Time { return m.opt.Now().UTC() }

// event adds an event about r to its channel's log.
func (m *Manager) event(r *Rollout, name, peer, detail string) {
	m.opt.Event(r.ChannelID, events.Event{Event: name, PeerID: peer, Detail: detail})
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "ro-" + hex.EncodeToString(b[:])
}

// Create starts a rollout of q on channelID for operator by: the targeted
// devices are taken from the registry now, the ones that cannot take the
// release skipped (and why), the canaries released at once (in a
// cluster, by the controller: the answer waits a little for it).
func (m *Manager) Create(channelID string, q Request, by string) (Rollout, error) {
	if !m.channels[channelID] {
		return Rollout{}, refuse(404, "no channel %q is configured", channelID)
	}
	if err := q.check(m.opt.MaxDevices); err != nil {
		return Rollout{}, refuse(400, "%v", err)
	}
	if err := m.opt.Releases.Ready(); err != nil {
		return Rollout{}, err
	}
	stored := m.opt.Releases.List(q.Version)
	if len(stored) == 0 {
		return Rollout{}, refuse(404, "no release %s is stored: upload it first (termrig release upload)", q.Version)
	}
	peers, err := m.targets(channelID, q.Target)
	if err != nil {
		return Rollout{}, err
	}
	now := m.now()
	r := Rollout{ID: newID(), ChannelID: channelID, Version: q.Version, Target: q.Target, Canary: q.Canary, Percent: q.Percent,
		AllowDowngrade: q.AllowDowngrade, GateSeconds: q.GateSeconds, Window: q.Window, Zone: q.Zone, Force: q.Force, State: Running, Wave: -1,
		CreatedBy: by, CreatedAt: now, UpdatedAt: now}
	r.Devices, r.Waves = m.plan(&r, peers, now)
	if max := m.info.MaxRecordBytes / 2; max > 0 { // room for the devices' reasons to come
		if b, err := json.Marshal(&r); err == nil && len(b) > max {
			return Rollout{}, refuse(507, "%s: %d devices make a record of %d bytes; this server's rollouts keep at most %d (target fewer devices)", r.Target, len(r.Devices), len(b), max)
		}
	}

	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return Rollout{}, refuse(503, "the server is stopping")
	}
	for _, id := range m.order {
		if o := m.byID[id]; o.r.ChannelID == channelID && o.r.Active() {
			m.mu.Unlock()
			return Rollout{}, refuse(409, "rollout %s of %s is %s on channel %s: abort it first (one active rollout per channel)", o.r.ID, o.r.Version, o.r.State, channelID)
		}
	}
	var dropped []string
	for len(m.order) >= m.opt.MaxRollouts {
		i := slices.IndexFunc(m.order, func(id string) bool { return !m.byID[id].r.Active() })
		if i < 0 {
			m.mu.Unlock()
			return Rollout{}, refuse(409, "%d rollouts are active, the most kept: abort one first", len(m.order))
		}
		dropped = append(dropped, m.order[i])
		m.gone[m.order[i]] = m.byID[m.order[i]].rev // save removes its record
		m.dropLocked(m.order[i])
	}
	e := newEntry(r)
	m.byID[r.ID] = e
	m.order = append(m.order, r.ID)
	m.dirty[r.ID] = true
	counts := countStates(e.r.Devices)
	var when string
	if r.Window != "" {
		when = fmt.Sprintf("; window %s %s", r.Window, cmp.Or(r.Zone, ZoneUTC))
	}
	if r.Force {
		when += "; forced (sent even to devices in use, outside any window)"
	}
	m.event(&e.r, events.RolloutCreated, "", fmt.Sprintf("rollout %s of %s to %s by %s: %d devices, %d canaries, waves of %d%%; %d skipped, %d installed already%s",
		r.ID, r.Version, r.Target, by, len(r.Devices), min(r.Canary, countWave(r.Devices, 0)), r.Percent, counts[Skipped], counts[Installed], when))
	m.mu.Unlock()
	// Durable before anything is sent, and before the answer.
	for _, id := range append(dropped, r.ID) {
		if err := m.save(id, false); err != nil {
			m.mu.Lock()
			m.dropLocked(r.ID)
			m.mu.Unlock()
			return Rollout{}, refuse(500, "the rollout was not kept: %v", err)
		}
	}
	m.mu.Lock()
	m.advanceLocked(e)
	out := m.viewLocked(e, true)
	m.mu.Unlock()
	m.poke()
	if m.info.Shared {
		out = m.awaitRelease(e)
	}
	return out, nil
}

// targets lists the peers q names, from the registry.
func (m *Manager) targets(channelID string, t Target) ([]registry.Peer, error) {
	var peers []registry.Peer
	switch {
	case t.All:
		peers = m.opt.Devices.List(channelID, registry.Filter{})
	case t.Tag != "":
		k, v, _ := strings.Cut(t.Tag, "=")
		peers = m.opt.Devices.List(channelID, registry.Filter{Tags: map[string]string{k: v}})
	default:
		var unknown []string
		for _, id := range t.Peers {
			p, ok := m.opt.Devices.Get(channelID, id)
			if !ok {
				unknown = append(unknown, id)
				continue
			}
			peers = append(peers, p)
		}
		if len(unknown) > 0 {
			return nil, refuse(404, "peer %s not known on channel %s (a device is known once it has connected)", strings.Join(unknown[:min(len(unknown), 5)], ", "), channelID)
		}
	}
	if len(peers) == 0 {
		return nil, refuse(404, "%s: no device of channel %s", t, channelID)
	}
	if len(peers) > m.opt.MaxDevices {
		return nil, refuse(413, "%s: %d devices; a rollout takes at most %d", t, len(peers), m.opt.MaxDevices)
	}
	return peers, nil
}

// plan gives each targeted device its first state and its wave: the ones
// that cannot take the release are skipped (or installed, already on
// it); of the rest, online ones first then by peer id, the first Canary
// are wave 0 and the others go in waves of Percent of them.
func (m *Manager) plan(r *Rollout, peers []registry.Peer, now time.Time) ([]Device, int) {
	var eligible []registry.Peer
	devs := make([]Device, 0, len(peers))
	for _, p := range peers {
		d := Device{PeerID: p.PeerID, Platform: p.Platform, Wave: -1, Since: now, Running: p.Version}
		switch {
		case !slices.Contains(p.Capabilities, link.CapUpdate):
			d.State, d.Reason = Skipped, "it does not list the update capability (termd without --supervise or a release key)"
		case p.Version == r.Version:
			d.State, d.Reason = Installed, "it runs "+r.Version+" already"
		case p.Platform == "":
			d.State, d.Reason = Skipped, "it reported no platform"
		case !r.AllowDowngrade && isDowngrade(r.Version, p.Version):
			// The device would refuse it; the server knows before it asks.
			d.State, d.Reason = Skipped, "it runs "+p.Version+", newer than "+r.Version+": a downgrade (start the rollout with allow_downgrade to send it)"
		default:
			if _, ok := m.opt.Releases.Manifest(r.Version, p.Platform); !ok {
				d.State, d.Reason = Skipped, "no release "+r.Version+" for its platform "+p.Platform
			}
		}
		if d.State == "" {
			d.State = Pending
			eligible = append(eligible, p)
		} else {
			devs = append(devs, d)
		}
	}
	sort.SliceStable(eligible, func(i, j int) bool {
		if eligible[i].Online != eligible[j].Online {
			return eligible[i].Online
		}
		return eligible[i].PeerID < eligible[j].PeerID
	})
	canary := min(r.Canary, len(eligible))
	size := max(1, (r.Percent*len(eligible)+99)/100)
	waves := 1
	for i, p := range eligible {
		d := Device{PeerID: p.PeerID, Platform: p.Platform, State: Pending, Since: now, Running: p.Version}
		if i >= canary {
			d.Wave = 1 + (i-canary)/size
		}
		waves = max(waves, d.Wave+1)
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].PeerID < devs[j].PeerID })
	return devs, waves
}

func countWave(devs []Device, w int) int {
	n := 0
	for _, d := range devs {
		if d.Wave == w {
			n++
		}
	}
	return n
}

func countStates(devs []Device) map[string]int {
	c := map[string]int{}
	for _, d := range devs {
		c[d.State]++
	}
	return c
}

// setLocked moves a device to state (with reason).
func (m *Manager) setLocked(e *entry, d *Device, state, reason string) {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	if d.State == state && d.Reason == reason {
		return
	}
	d.State, d.Reason, d.Since = state, reason, m.now()
	if state != Offline {
		d.Was = ""
	}
	e.r.UpdatedAt = d.Since
	m.dirty[e.r.ID] = true
}

// updateID is the update_id of a device's current attempt.
func updateID(r *Rollout, d *Device) string { return fmt.Sprintf("%s.%d", r.ID, d.Attempt) }

// sendLocked sends d its update frame: sent, or offline when it is not
// connected here (it gets the frame when it connects, or from the node
// it is connected to: sweepLocked).
func (m *Manager) sendLocked(e *entry, d *Device) {
	if !m.trySendLocked(e, d) && d.State != Skipped && d.State != Waiting {
		if d.Attempt == 0 {
			d.Attempt = 1
		}
		m.setLocked(e, d, Offline, "not connected when released: sent when it connects")
		d.Was = ""
	}
}

// trySendLocked sends d its update frame when it is connected here
// (sent), and changes nothing else when it is not (false). A release no
// longer stored skips it; a device the window or its use holds waits
// (holdLocked: Waiting, false).
func (m *Manager) trySendLocked(e *entry, d *Device) bool {
	r := &e.r
	if m.opt.Releases.Ready() != nil {
		return false // sent once the releases are loaded
	}
	man, ok := m.opt.Releases.Manifest(r.Version, d.Platform)
	if !ok {
		m.setLocked(e, d, Skipped, "release "+r.Version+" for "+d.Platform+" is no longer stored")
		m.event(r, events.RolloutDevice, d.PeerID, "skipped: "+d.Reason)
		return false
	}
	if why := m.holdLocked(r, d); why != "" {
		m.waitLocked(e, d, why)
		return false
	}
	attempt := max(d.Attempt, 1)
	f := &link.Update{UpdateID: updateID(r, &Device{Attempt: attempt}), Version: r.Version, Manifest: string(man.Marshal()),
		URL: m.opt.URL(r.ChannelID, r.Version, d.Platform), AllowDowngrade: r.AllowDowngrade, GateSeconds: r.GateSeconds}
	m.offerPatch(r, d, f) // patch.go
	if !m.opt.Send(r.ChannelID, d.PeerID, f) {
		return false
	}
	if d.Attempt != attempt {
		d.Attempt = attempt
		m.dirty[r.ID] = true
	}
	m.setLocked(e, d, Sent, "")
	return true
}

// settledLocked reports whether every device of waves up to w is where
// the next wave may go: installed, skipped or failed; offline counts
// too after the canaries (it gets the release when it is back), and so
// does waiting in use (it gets it when it is idle); waiting for the
// window never does (nothing goes out of the window).
func settledLocked(r *Rollout, w int) bool {
	for i := range r.Devices {
		d := &r.Devices[i]
		if d.Wave < 0 || d.Wave > w || final(d.State) || (d.State == Offline && d.Wave > 0) || (d.State == Waiting && d.Reason == WaitInUse && d.Wave > 0) {
			continue
		}
		return false
	}
	return true
}

// advanceLocked releases the next waves as the ones before settle, and
// ends the rollout once every device is final. Nothing is released
// before the rollout's record is stored (Create writes it first). A
// device still pending in a wave already released (a release that
// never reached the record) is released now.
func (m *Manager) advanceLocked(e *entry) {
	r := &e.r
	if r.State != Running || !m.control || e.rev == 0 {
		return
	}
	for i := range r.Devices {
		if d := &r.Devices[i]; d.State == Pending && d.Wave >= 0 && d.Wave <= r.Wave {
			m.opt.Log.Warn("rollout: a device of a released wave was still pending: released now",
				"rollout", r.ID, "peer_id", d.PeerID, "wave", d.Wave)
			m.sendLocked(e, d)
		}
	}
	for (r.Wave < 0 || settledLocked(r, r.Wave)) && r.Wave+1 < r.Waves {
		r.Wave++
		n := 0
		for i := range r.Devices {
			if d := &r.Devices[i]; d.Wave == r.Wave && d.State == Pending {
				m.sendLocked(e, d)
				n++
			}
		}
		r.UpdatedAt = m.now()
		m.dirty[r.ID] = true
		if n > 0 {
			what := fmt.Sprintf("wave %d of %d", r.Wave, r.Waves-1)
			if r.Wave == 0 {
				what = "the canaries"
			}
			m.event(r, events.RolloutWave, "", fmt.Sprintf("rollout %s of %s: %s released (%d devices)", r.ID, r.Version, what, n))
		}
	}
	for i := range r.Devices {
		if !final(r.Devices[i].State) {
			return
		}
	}
	r.State, r.UpdatedAt = Done, m.now()
	m.dirty[r.ID] = true
	c := countStates(r.Devices)
	r.Note = fmt.Sprintf("done: %d installed, %d failed, %d skipped", c[Installed], c[Failed]+c[RolledBack]+c[Refused], c[Skipped])
	m.event(r, events.RolloutDone, "", "rollout "+r.ID+" of "+r.Version+" "+r.Note)
}

// findLocked is the newest active rollout of channelID that targets
// peerID, and the device.
func (m *Manager) findLocked(channelID, peerID string) (*entry, *Device) {
	for i := len(m.order) - 1; i >= 0; i-- {
		e := m.byID[m.order[i]]
		if e.r.ChannelID != channelID || !e.r.Active() {
			continue
		}
		if j, ok := e.idx[peerID]; ok {
			return e, &e.r.Devices[j]
		}
	}
	return nil, nil
}

// DeviceConnected (fleet operations): a device of a running
// rollout that was offline when released, or that lost its frame, gets
// it now; one that connects running the release waits for its installed.
func (m *Manager) DeviceConnected(channelID string, c *link.Connect) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, d := m.findLocked(channelID, c.PeerID)
	if e == nil {
		return
	}
	d.Running = httpapi.TruncateUTF8(c.Version, link.MaxVersionBytes) // connect's version is the device's word
	r := &e.r
	if r.State != Running {
		switch {
		case d.State != Offline:
		case d.Was == Downloading || d.Was == Restarting:
			m.setLocked(e, d, d.Was, "back after going offline") // its update_status says how that went
		default:
			m.setLocked(e, d, Offline, "connected while the rollout is paused: sent when it is resumed")
		}
		return
	}
	switch {
	case final(d.State) || d.State == Pending:
	case c.Version == r.Version:
		if d.State != Restarting {
			m.setLocked(e, d, Restarting, "connected running "+r.Version+": waiting for its health gate")
		}
	case d.State == Sent || d.State == Waiting || (d.State == Offline && (d.Was == "" || d.Was == Sent)):
		m.sendLocked(e, d)
	case d.State == Offline:
		// It was downloading or restarting: its update_status says how
		// that went (a device at rest on its old version gets the
		// frame again then).
		m.setLocked(e, d, d.Was, "back after going offline")
	}
	m.advanceLocked(e)
}

// Answers is the answer frame the rollouts take: update_status.
func (m *Manager) Answers() link.Type { return link.TypeUpdateStatus }

// Report takes a device's update_status about the release of an active
// rollout of its channel (the server's fleet operations; issue 36: a
// device is believed only about what it was asked). A failure pauses a
// running rollout, naming the device; a report about an earlier attempt
// (another update_id) is not news. believed is true when the report is
// about the update this rollout sent that device now (its attempt's
// update_id, or none: the device's report on connect), so the registry
// may keep it as the device's update state; an error when its update_id
// names no update this server sent that device (a resend of an earlier
// one, kept in a rollout still stored, is no error). Anything else
// changes nothing here.
//
// What it believed is kept in the device registry (Devices.SetUpdate):
// the rollouts' rule, not the server's.
func (m *Manager) Report(channelID, peerID string, f link.Frame) (believed bool, err error) {
	if believed, err = m.report(channelID, peerID, f); believed {
		st := f.(*link.UpdateStatus)
		m.opt.Devices.SetUpdate(channelID, peerID, registry.UpdateState{Version: st.Version, State: st.State, Reason: st.Reason})
	}
	return believed, err
}

func (m *Manager) report(channelID, peerID string, f link.Frame) (believed bool, err error) {
	st, ok := f.(*link.UpdateStatus)
	if !ok {
		return false, fmt.Errorf("rollouts take update_status frames, not %s", f.FrameType())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.UpdateID != "" && !m.sentLocked(channelID, peerID, st.UpdateID) {
		return false, fmt.Errorf("update_id %q names no update this server sent to %s", httpapi.TruncateUTF8(st.UpdateID, link.MaxFleetIDBytes), peerID)
	}
	e, d := m.findLocked(channelID, peerID)
	if e == nil || d.Attempt == 0 {
		// Never sent this rollout's release: whatever it says is about
		// an update of another rollout (resent on a connect) or one
		// nobody asked for, and changes nothing here.
		return false, nil
	}
	r := &e.r
	if st.Running != "" {
		d.Running = st.Running
	}
	if st.Version != r.Version {
		// At rest on another version while we wait for its download:
		// the device restarted and lost our frame.
		if st.State == link.UpdateInstalled && (d.State == Downloading || (d.State == Offline && d.Was == Downloading)) {
			if r.State == Running {
				m.sendLocked(e, d)
			} else {
				m.setLocked(e, d, Offline, "at rest on "+st.Running+": sent when the rollout is resumed")
				d.Was = ""
			}
		}
		return false, nil
	}
	if st.UpdateID != "" && st.UpdateID != updateID(r, d) {
		return false, nil // an earlier attempt's, resent on a connect
	}
	switch st.State {
	case link.UpdateInstalled:
		if d.Running == r.Version { // it runs the release: it passed its gate
			m.setLocked(e, d, Installed, "")
			believed = true
		}
	case link.UpdateDownloading, link.UpdateRestarting:
		if !final(d.State) {
			m.setLocked(e, d, st.State, "")
			m.notePatchLocked(e, d, st.Reason) // patch.go
			believed = true
		}
	case link.UpdateFailed, link.UpdateRolledBack, link.UpdateRefused:
		if d.State == st.State || (st.UpdateID == "" && d.State != Restarting && !(d.State == Offline && d.Was == Restarting)) {
			// The same failure again, or (no update_id: the device's
			// start report) a rollback of an earlier attempt.
			return false, nil
		}
		believed = true
		m.setLocked(e, d, st.State, st.Reason)
		m.event(r, events.RolloutDevice, peerID, fmt.Sprintf("rollout %s: %s %s: %s", r.ID, r.Version, st.State, st.Reason))
		if r.State == Running {
			r.State = Paused
			r.Paused = &Pause{PeerID: peerID, State: st.State, Reason: d.Reason, At: m.now()}
			r.Note = fmt.Sprintf("paused by itself: %s %s: %s", peerID, st.State, d.Reason)
			m.event(r, events.RolloutPaused, peerID, "rollout "+r.ID+" "+r.Note)
		}
		m.poke()
	}
	m.advanceLocked(e)
	return believed, nil
}

// sentLocked reports whether id is the update_id of an update a rollout
// still stored sent peer of channel: "<rollout id>.<attempt>", an
// attempt it made (m.mu held).
func (m *Manager) sentLocked(channelID, peerID, id string) bool {
	i := strings.LastIndexByte(id, '.')
	if i < 0 {
		return false
	}
	e := m.byID[id[:i]]
	if e == nil || e.r.ChannelID != channelID {
		return false
	}
	j, ok := e.idx[peerID]
	if !ok {
		return false
	}
	n, err := strconv.Atoi(id[i+1:])
	return err == nil && n >= 1 && n <= e.r.Devices[j].Attempt && id == updateID(&e.r, &Device{Attempt: n})
}

// Pause pauses a running rollout: nothing new is sent.
func (m *Manager) Pause(channelID, id, by string) (Rollout, error) {
	return m.act(channelID, id, func(e *entry) error {
		r := &e.r
		if r.State != Running {
			return refuse(409, "rollout %s is %s, not running", r.ID, r.State)
		}
		r.State, r.Paused = Paused, &Pause{Reason: "paused by " + by, By: by, At: m.now()}
		r.Note = "paused by " + by
		m.event(r, events.RolloutPaused, "", "rollout "+r.ID+" of "+r.Version+" paused by "+by)
		return nil
	})
}

// Resume continues a paused rollout; with retry the devices that failed
// are sent the release again (a new attempt), else they stay failed.
func (m *Manager) Resume(channelID, id, by string, retry bool) (Rollout, error) {
	return m.act(channelID, id, func(e *entry) error {
		r := &e.r
		if r.State != Paused {
			return refuse(409, "rollout %s is %s, not paused", r.ID, r.State)
		}
		r.State, r.Paused = Running, nil
		n := 0
		if retry {
			for i := range r.Devices {
				if d := &r.Devices[i]; isFailure(d.State) {
					d.Attempt++
					m.setLocked(e, d, Pending, "retried by "+by)
					if d.Wave <= r.Wave {
						m.sendLocked(e, d)
					}
					n++
				}
			}
		}
		r.Note = fmt.Sprintf("resumed by %s (%d failed devices retried)", by, n)
		m.event(r, events.RolloutResumed, "", "rollout "+r.ID+" of "+r.Version+" "+r.Note)
		// Offline devices that came back while it was paused.
		for i := range r.Devices {
			if d := &r.Devices[i]; d.State == Offline && (d.Was == "" || d.Was == Sent) {
				if p, ok := m.opt.Devices.Get(r.ChannelID, d.PeerID); ok && p.Online {
					m.sendLocked(e, d)
				}
			}
		}
		return nil
	})
}

// Abort ends an active rollout: nothing more is sent (a device already
// updating finishes on its own, and its reports are no longer taken).
func (m *Manager) Abort(channelID, id, by string) (Rollout, error) {
	return m.act(channelID, id, func(e *entry) error {
		r := &e.r
		if !r.Active() {
			return refuse(409, "rollout %s is %s already", r.ID, r.State)
		}
		r.State, r.Paused = Aborted, nil
		r.Note = "aborted by " + by
		m.event(r, events.RolloutAborted, "", "rollout "+r.ID+" of "+r.Version+" aborted by "+by)
		return nil
	})
}

// act runs an operator action and writes the rollout before it answers.
// The action is done on a copy of the rollout (with a shared store, as
// it is at the store), written at the revision it was read at, and
// taken in once written: when another node wrote the record first, it
// is done again (its checks too) on the new record, and refused (409)
// after maxConflicts such writes in a row.
func (m *Manager) act(channelID, id string, f func(*entry) error) (Rollout, error) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		if m.info.Shared {
			if err := m.refresh(id); err != nil {
				return Rollout{}, refuse(503, "the rollout's record cannot be read: %v", err)
			}
		}
		// The action's record is this node's as written: what is
		// behind goes first, and no other write of it meanwhile.
		m.saveMu.Lock()
		if err := m.saveHeld(id, true); err != nil && !errors.Is(err, ErrConflict) {
			m.saveMu.Unlock()
			return Rollout{}, refuse(500, "the rollout's state before the action was not written (nothing changed): %v", err)
		}
		m.mu.Lock()
		e := m.byID[id]
		if e == nil || e.r.ChannelID != channelID {
			m.mu.Unlock()
			m.saveMu.Unlock()
			return Rollout{}, refuse(404, "no rollout %s on channel %s", id, channelID)
		}
		start := cloneRollout(&e.r)
		c := newEntry(cloneRollout(&e.r))
		c.rev = e.rev // the copy is of the stored record (0: still being created, so nothing is released)
		if err := f(c); err != nil {
			m.mu.Unlock()
			m.saveMu.Unlock()
			return Rollout{}, err
		}
		c.r.UpdatedAt = m.now()
		m.advanceLocked(c)
		rev := e.rev
		// What the action sent is this node's state at once: a device
		// answers its frame (its reports, its download, which is checked
		// against what it was sent) while the record is being written,
		// and an answer checked against the record before the action
		// was refused (TestReleaseRollout under load: a device released
		// by a resume had its download refused and stayed "sent").
		e.r = cloneRollout(&c.r)
		m.mu.Unlock()
		data, err := json.Marshal(&c.r)
		if err == nil {
			var nrev uint64
			if nrev, err = m.st.Put(ctx, id, data, rev); err == nil {
				m.mu.Lock()
				if m.byID[id] == e && nrev > e.rev {
					// Taken in with what this node did since the copy.
					e.r = merge(&start, &e.r, &c.r)
					e.base, e.rev = cloneRollout(&c.r), nrev
					if !sameRollout(&e.r, &c.r) {
						m.dirty[id] = true
					}
				}
				m.mu.Unlock()
			}
		}
		if err != nil {
			// Not written: the action is undone here (what changed since
			// it is kept); a conflict does it again on the newer record.
			m.mu.Lock()
			if m.byID[id] == e {
				e.r = merge(&c.r, &e.r, &start)
			}
			m.mu.Unlock()
		}
		m.saveMu.Unlock()
		if errors.Is(err, ErrConflict) {
			if attempt < maxConflicts {
				continue
			}
			return Rollout{}, refuse(409, "rollout %s was changed through another node %d times meanwhile: try again", id, attempt)
		}
		if err != nil {
			return Rollout{}, refuse(500, "the rollout's new state was not written (nothing changed): %v", err)
		}
		return m.Get(channelID, id)
	}
}

// Get is one rollout with its devices (and whether each is online).
func (m *Manager) Get(channelID, id string) (Rollout, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byID[id]
	if e == nil || e.r.ChannelID != channelID {
		return Rollout{}, refuse(404, "no rollout %s on channel %s", id, channelID)
	}
	return m.viewLocked(e, true), nil
}

// List is the channel's rollouts (of version, when not ""), newest
// first, without their devices.
func (m *Manager) List(channelID, version string) []Rollout {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []Rollout{}
	for i := len(m.order) - 1; i >= 0; i-- {
		e := m.byID[m.order[i]]
		if e.r.ChannelID == channelID && (version == "" || e.r.Version == version) {
			out = append(out, m.viewLocked(e, false))
		}
	}
	return out
}

// viewLocked is a copy of e's rollout for the API: its counts, and its
// devices (with the registry's online) when devices.
func (m *Manager) viewLocked(e *entry, devices bool) Rollout {
	r := e.r
	r.Target.Peers = slices.Clone(r.Target.Peers)
	if r.Paused != nil {
		p := *r.Paused
		r.Paused = &p
	}
	r.Counts = countStates(r.Devices)
	if !devices {
		r.Devices = nil
		return r
	}
	r.Devices = slices.Clone(r.Devices)
	for i := range r.Devices {
		p, ok := m.opt.Devices.Get(r.ChannelID, r.Devices[i].PeerID)
		on := ok && p.Online
		r.Devices[i].Online = &on
	}
	return r
}

// isDowngrade reports whether target is older than running, by the rule
// termd applies (release.CompareVersions); versions that do not order
// (a development build) are not taken for a downgrade: the device
// decides.
func isDowngrade(target, running string) bool {
	c, err := release.CompareVersions(target, running)
	return err == nil && c < 0
}
