package rollout

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"termlink/internal/durable"
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
}

// Releases is the release store as a rollout reads it.
type Releases interface {
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
	// Tick is how often offline devices are looked for, waves advanced
	// and device reports written (default 1 s).
	Tick        time.Duration
	MaxRollouts int // default DefaultMaxRollouts
	MaxDevices  int // default DefaultMaxDevices
	NoSync      bool
	Now         func() time.Time
	Log         *slog.Logger
}

// Error is a refusal, with the HTTP status the API answers it with.
type Error = httpapi.StatusError

var refuse = httpapi.Refuse

// entry is one rollout and its index.
type entry struct {
	r   Rollout
	idx map[string]int // peer id -> index in r.Devices
}

// Manager runs the rollouts. It is a part of the server's fleet
// operations (DeviceConnected, Answers, Report).
type Manager struct {
	opt      Options
	channels map[string]bool

	saveMu sync.Mutex // orders the files' writes: marshalled and written under it

	mu      sync.Mutex
	byID    map[string]*entry
	order   []string        // ids, oldest first
	dirty   map[string]bool // ids whose file is behind
	stopped bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

// Open loads the rollouts kept in opt.Dir (a file that does not parse is
// moved aside as <name>.bad, with the reason logged) and starts the
// Manager's ticker; Close stops it.
func Open(opt Options) (*Manager, error) {
	if opt.Tick <= 0 {
		opt.Tick = time.Second
	}
	if opt.MaxRollouts <= 0 {
		opt.MaxRollouts = DefaultMaxRollouts
	}
	if opt.MaxDevices <= 0 {
		opt.MaxDevices = DefaultMaxDevices
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Event == nil {
		opt.Event = func(string, events.Event) {}
	}
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("rollouts: %w", err)
	}
	m := &Manager{opt: opt, channels: map[string]bool{}, byID: map[string]*entry{}, dirty: map[string]bool{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for _, c := range opt.Channels {
		m.channels[c] = true
	}
	if err := m.load(); err != nil {
		return nil, err
	}
	go m.run()
	return m, nil
}

func (m *Manager) load() error {
	names, err := filepath.Glob(filepath.Join(m.opt.Dir, "ro-*.json"))
	if err != nil {
		return err
	}
	var loaded []*entry
	for _, name := range names {
		r, err := readFile(name, m.opt.MaxDevices)
		if err == nil && r.ID+".json" != filepath.Base(name) {
			err = fmt.Errorf("the file holds rollout %s", r.ID)
		}
		if err != nil {
			m.opt.Log.Error("rollout file not loaded: moved aside", "file", name, "err", err)
			_ = os.Rename(name, name+".bad")
			continue
		}
		if !m.channels[r.ChannelID] && r.Active() {
			m.opt.Log.Warn("rollout of a channel no longer configured: kept, inert", "rollout", r.ID, "channel_id", r.ChannelID)
		}
		loaded = append(loaded, newEntry(*r))
	}
	sort.Slice(loaded, func(i, j int) bool { return loaded[i].r.CreatedAt.Before(loaded[j].r.CreatedAt) })
	for _, e := range loaded {
		m.byID[e.r.ID] = e
		m.order = append(m.order, e.r.ID)
	}
	if len(loaded) > 0 {
		m.opt.Log.Info("rollouts loaded", "count", len(loaded))
	}
	return nil
}

func readFile(name string, maxDevices int) (*Rollout, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	return Parse(b, maxDevices)
}

func newEntry(r Rollout) *entry {
	e := &entry{r: r, idx: make(map[string]int, len(r.Devices))}
	for i, d := range r.Devices {
		e.idx[d.PeerID] = i
	}
	return e
}

// Close stops the ticker and writes what is behind.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return nil
	}
	m.stopped = true
	m.mu.Unlock()
	close(m.stop)
	<-m.done
	return m.flush()
}

// run is the ticker: offline devices, waves, and the files behind.
func (m *Manager) run() {
	defer close(m.done)
	t := time.NewTicker(m.opt.Tick)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.tick()
		case <-m.wake:
		}
		if err := m.flush(); err != nil {
			m.opt.Log.Error("rollouts not written", "err", err)
		}
	}
}

// poke asks the ticker to write the files behind now.
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// flush writes every rollout whose file is behind.
func (m *Manager) flush() error {
	m.mu.Lock()
	ids := make([]string, 0, len(m.dirty))
	for id := range m.dirty {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, m.save(id))
	}
	return errors.Join(errs...)
}

// save writes one rollout's file (or removes it when it was dropped).
func (m *Manager) save(id string) error {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	m.mu.Lock()
	e := m.byID[id]
	delete(m.dirty, id)
	var data []byte
	var err error
	if e != nil {
		data, err = json.Marshal(&e.r)
	}
	m.mu.Unlock()
	path := filepath.Join(m.opt.Dir, id+".json")
	if err != nil {
		return err
	}
	if e == nil {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	if err := durable.WriteFile(path, func(w *bufio.Writer) error { _, err := w.Write(data); return err }, m.opt.NoSync); err != nil {
		m.mu.Lock()
		m.dirty[id] = true // try again at the next tick
		m.mu.Unlock()
		return err
	}
	return nil
}

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
// release skipped (and why), the canaries released at once.
func (m *Manager) Create(channelID string, q Request, by string) (Rollout, error) {
	if !m.channels[channelID] {
		return Rollout{}, refuse(404, "no channel %q is configured", channelID)
	}
	if err := q.check(m.opt.MaxDevices); err != nil {
		return Rollout{}, refuse(400, "%v", err)
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
		AllowDowngrade: q.AllowDowngrade, GateSeconds: q.GateSeconds, State: Running, Wave: -1,
		CreatedBy: by, CreatedAt: now, UpdatedAt: now}
	r.Devices, r.Waves = m.plan(&r, peers, now)

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
		delete(m.byID, m.order[i])
		m.dirty[m.order[i]] = true // save removes its file
		m.order = slices.Delete(m.order, i, i+1)
	}
	e := newEntry(r)
	m.byID[r.ID] = e
	m.order = append(m.order, r.ID)
	m.dirty[r.ID] = true
	counts := countStates(e.r.Devices)
	m.event(&e.r, events.RolloutCreated, "", fmt.Sprintf("rollout %s of %s to %s by %s: %d devices, %d canaries, waves of %d%%; %d skipped, %d installed already",
		r.ID, r.Version, r.Target, by, len(r.Devices), min(r.Canary, countWave(r.Devices, 0)), r.Percent, counts[Skipped], counts[Installed]))
	m.mu.Unlock()
	// Durable before anything is sent, and before the answer.
	for _, id := range append(dropped, r.ID) {
		if err := m.save(id); err != nil {
			m.mu.Lock()
			delete(m.byID, r.ID)
			m.order = slices.DeleteFunc(m.order, func(s string) bool { return s == r.ID })
			delete(m.dirty, r.ID)
			m.mu.Unlock()
			return Rollout{}, refuse(500, "the rollout was not kept: %v", err)
		}
	}
	m.mu.Lock()
	m.advanceLocked(e)
	out := m.viewLocked(e, true)
	m.mu.Unlock()
	m.poke()
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
// connected (it gets the frame when it connects).
func (m *Manager) sendLocked(e *entry, d *Device) {
	r := &e.r
	man, ok := m.opt.Releases.Manifest(r.Version, d.Platform)
	if !ok {
		m.setLocked(e, d, Skipped, "release "+r.Version+" for "+d.Platform+" is no longer stored")
		m.event(r, events.RolloutDevice, d.PeerID, "skipped: "+d.Reason)
		return
	}
	if d.Attempt == 0 {
		d.Attempt = 1
	}
	f := &link.Update{UpdateID: updateID(r, d), Version: r.Version, Manifest: string(man.Marshal()),
		URL: m.opt.URL(r.ChannelID, r.Version, d.Platform), AllowDowngrade: r.AllowDowngrade, GateSeconds: r.GateSeconds}
	if m.opt.Send(r.ChannelID, d.PeerID, f) {
		m.setLocked(e, d, Sent, "")
		return
	}
	m.setLocked(e, d, Offline, "not connected when released: sent when it connects")
	d.Was = ""
}

// settledLocked reports whether every device of waves up to w is where
// the next wave may go: installed, skipped or failed; offline counts
// too after the canaries (it gets the release when it is back).
func settledLocked(r *Rollout, w int) bool {
	for i := range r.Devices {
		d := &r.Devices[i]
		if d.Wave < 0 || d.Wave > w || final(d.State) || (d.State == Offline && d.Wave > 0) {
			continue
		}
		return false
	}
	return true
}

// advanceLocked releases the next waves as the ones before settle, and
// ends the rollout once every device is final.
func (m *Manager) advanceLocked(e *entry) {
	r := &e.r
	if r.State != Running {
		return
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
	case d.State == Sent || (d.State == Offline && (d.Was == "" || d.Was == Sent)):
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

// tick marks the devices that went offline mid-update, sends the ones
// released while offline that are online now (a queue that was full),
// and advances the waves.
func (m *Manager) tick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range m.order {
		e := m.byID[id]
		r := &e.r
		if r.State != Running {
			continue
		}
		for i := range r.Devices {
			d := &r.Devices[i]
			switch d.State {
			case Sent, Downloading, Restarting:
				if p, ok := m.opt.Devices.Get(r.ChannelID, d.PeerID); !ok || !p.Online {
					was := d.State
					m.setLocked(e, d, Offline, "went offline while "+was)
					d.Was = was
				}
			case Offline:
				if d.Was == "" || d.Was == Sent {
					if p, ok := m.opt.Devices.Get(r.ChannelID, d.PeerID); ok && p.Online {
						m.sendLocked(e, d)
					}
				}
			}
		}
		m.advanceLocked(e)
	}
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
func (m *Manager) act(channelID, id string, f func(*entry) error) (Rollout, error) {
	m.mu.Lock()
	e := m.byID[id]
	if e == nil || e.r.ChannelID != channelID {
		m.mu.Unlock()
		return Rollout{}, refuse(404, "no rollout %s on channel %s", id, channelID)
	}
	if err := f(e); err != nil {
		m.mu.Unlock()
		return Rollout{}, err
	}
	e.r.UpdatedAt = m.now()
	m.dirty[id] = true
	m.advanceLocked(e)
	m.mu.Unlock()
	if err := m.save(id); err != nil {
		return Rollout{}, refuse(500, "the rollout's new state was not written (it holds in memory; retried each tick): %v", err)
	}
	return m.Get(channelID, id)
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
