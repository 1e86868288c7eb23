// Package rollout runs staged rollouts of signed termd releases (issue
// 28) over the devices of a channel: canaries first, then waves of a
// percentage of the targeted devices, each released only once the ones
// before have settled; a rollout pauses by itself when any device
// reports its update failed, rolled back or refused, and names it. The
// operator resumes (optionally retrying the failed devices) or aborts.
//
// A Manager is the server's wschannel.Fleet part for updates: it sends
// update frames to live connections (the release's manifest and the URL
// of the devices' download route), learns of each connect (a device
// offline when its wave was released gets its frame then) and of each
// update_status. Its rules are written once above a Storage
// (storage.go): one record per rollout with a compare-and-set revision,
// a feed of the changes other writers make, and the controller's lease.
// On one server it is the workspace's directory (LocalStorage:
// workspace/rollouts, one JSON file per rollout, replaced atomically by
// internal/durable); operator actions are written before they are
// answered, device reports behind, within a tick (a crash may lose the
// last second of reports; devices report their state again on every
// connect). Every record read is checked by the strict parser (Parse).
//
// In a cluster it is package cluster's KV bucket, shared by every node
// (control.go): each node sends the frames to the devices connected to
// it and writes their reports into the shared record (two nodes' writes
// are merged), and the node holding the lease alone advances the
// rollouts (the waves, the devices gone offline, the end), until it
// dies and another takes the lease once it expires.
//
// Bounds: at most MaxRollouts kept (the oldest finished ones are dropped
// for a new one; with none finished a new one is refused; the store may
// lower it: StorageInfo.MaxRecords), at most MaxDevices devices per
// rollout (refused past it, and past half the store's MaxRecordBytes),
// one active (running or paused) rollout per channel (two started at
// once through two nodes: the controller aborts the later one).
package rollout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"termlink/release"
	"termlink/server/httpapi"
	"termlink/server/identity"
)

// States of a rollout.
const (
	Running = "running"
	Paused  = "paused"
	Done    = "done"    // every device installed, skipped or failed (and resumed past)
	Aborted = "aborted" // by the operator: nothing more is sent
)

// States of a device in a rollout.
const (
	Pending     = "pending"     // its wave is not released yet
	Sent        = "sent"        // the update frame is on its connection
	Downloading = "downloading" // as the device reported
	Restarting  = "restarting"  // staged, restarting into it (or connected running it, before its health gate)
	Installed   = "installed"   // runs the release
	Failed      = "failed"      // the device's reason: download or its checks
	RolledBack  = "rolled_back" // the release failed its health gate
	Refused     = "refused"     // wrong platform, bad signature, downgrade ...
	Offline     = "offline"     // released while offline (sent when it connects), or went offline mid-update
	Skipped     = "skipped"     // not updated, and why: no "update" capability, no release for its platform
	// Waiting (hold.go): released, its frame held: Reason WaitInUse (the
	// device is in use) or WaitWindow (outside the rollout's window).
)

// Defaults and bounds.
const (
	DefaultMaxRollouts = 64
	DefaultMaxDevices  = 10000
	MaxGateSeconds     = 3600
	// maxFileBytes bounds a rollout file as it is loaded.
	maxFileBytes = 16 << 20
)

// Target is which devices of the channel a rollout updates: exactly one
// of Peers, Tag (key=value) or All.
type Target struct {
	Peers []string `json:"peers,omitempty"`
	Tag   string   `json:"tag,omitempty"`
	All   bool     `json:"all,omitempty"`
}

func (t Target) String() string {
	switch {
	case t.All:
		return "all devices"
	case t.Tag != "":
		return "tag " + t.Tag
	}
	s := strings.Join(t.Peers, ",")
	if len(t.Peers) > 5 {
		s = strings.Join(t.Peers[:5], ",") + fmt.Sprintf(",… (%d peers)", len(t.Peers))
	}
	return "peers " + s
}

// Request is what an operator asks for (the API's POST body).
type Request struct {
	Version string `json:"version"`
	Target
	// Canary is how many devices are updated first; the rest wait until
	// every canary reports installed.
	Canary int `json:"canary,omitempty"`
	// Percent: after the canaries, the rest go in waves of this share of
	// the targeted devices (1-100; 0 means 100: one wave).
	Percent        int  `json:"percent,omitempty"`
	AllowDowngrade bool `json:"allow_downgrade,omitempty"`
	// GateSeconds is the devices' health gate (0: each device's own).
	GateSeconds int `json:"gate_seconds,omitempty"`
	// Window is the maintenance window, "HH:MM-HH:MM" (24-hour; past
	// midnight when the end is before the start): nothing is sent outside
	// it. Zone is what it is read in: "utc" (the default) or "device"
	// (each device's zone as its busy frame said, else UTC). Force sends
	// regardless of the window and of the devices' use (hold.go).
	Window string `json:"window,omitempty"`
	Zone   string `json:"zone,omitempty"`
	Force  bool   `json:"force,omitempty"`
}

// Device is one targeted device's state in a rollout.
type Device struct {
	PeerID   string `json:"peer_id"`
	Platform string `json:"platform,omitempty"`
	// Wave: 0 the canaries, then 1, 2, ...; -1 not in any (skipped, or
	// installed already).
	Wave   int       `json:"wave"`
	State  string    `json:"state"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	// Running is the version the device last said it runs.
	Running string `json:"running,omitempty"`
	// Was is the state an offline device went offline in ("" : released
	// while offline).
	Was string `json:"was,omitempty"`
	// Attempt counts the update frames of this rollout meant for the
	// device (a retry is a new attempt): its update_id is
	// <rollout id>.<attempt>.
	Attempt int `json:"attempt,omitempty"`
	// Delivery is what the device said of the patch of its current
	// attempt (issue 43, patch.go): "patched: ..." or "patch failed:
	// ...; fetched the full binary"; "" for a whole binary.
	Delivery string `json:"delivery,omitempty"`
	// Online is the registry's, when the rollout is read (not kept).
	Online *bool `json:"online,omitempty"`
}

// Pause says why a rollout is paused.
type Pause struct {
	PeerID string    `json:"peer_id,omitempty"` // the device that failed ("" : the operator paused it)
	State  string    `json:"state,omitempty"`   // its state: failed, rolled_back, refused
	Reason string    `json:"reason"`
	By     string    `json:"by,omitempty"` // the operator
	At     time.Time `json:"at"`
}

// Rollout is one rollout, as kept and as the API shows it.
type Rollout struct {
	ID             string    `json:"id"`
	ChannelID      string    `json:"channel_id"`
	Version        string    `json:"version"`
	Target         Target    `json:"target"`
	Canary         int       `json:"canary"`
	Percent        int       `json:"percent"`
	AllowDowngrade bool      `json:"allow_downgrade,omitempty"`
	GateSeconds    int       `json:"gate_seconds,omitempty"`
	Window         string    `json:"window,omitempty"`
	Zone           string    `json:"zone,omitempty"`
	Force          bool      `json:"force,omitempty"`
	State          string    `json:"state"`
	Paused         *Pause    `json:"paused,omitempty"`
	Wave           int       `json:"wave"`  // the last wave released (-1: none yet)
	Waves          int       `json:"waves"` // waves in all, the canaries' (0) included
	CreatedBy      string    `json:"created_by"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	Note           string    `json:"note,omitempty"` // the last operator action or outcome
	Devices        []Device  `json:"devices,omitempty"`
	// Counts is the number of devices in each state (computed).
	Counts map[string]int `json:"counts,omitempty"`
}

// Active reports whether the rollout may still send (running) or may be
// resumed (paused).
func (r *Rollout) Active() bool { return r.State == Running || r.State == Paused }

var (
	idRE  = regexp.MustCompile(`^ro-[0-9a-f]{8,32}$`)
	tagRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}=[^\x00-\x1f]{0,128}$`)
)

// ValidID reports whether s may be a rollout id.
func ValidID(s string) bool { return idRE.MatchString(s) }

func validDeviceState(s string) bool {
	switch s {
	case Pending, Sent, Downloading, Restarting, Installed, Failed, RolledBack, Refused, Offline, Skipped, Waiting:
		return true
	}
	return false
}

// final reports whether a device state is where the device stays until
// an operator acts (installed, skipped, or a failure).
func final(s string) bool {
	switch s {
	case Installed, Skipped, Failed, RolledBack, Refused:
		return true
	}
	return false
}

// isFailure reports whether a device state is a failure.
func isFailure(s string) bool { return s == Failed || s == RolledBack || s == Refused }

// check says what is wrong with a request, or nil; it normalizes
// Percent.
func (q *Request) check(maxDevices int) error {
	if err := release.CheckVersion(q.Version); err != nil {
		return err
	}
	n := 0
	if len(q.Peers) > 0 {
		n++
	}
	if q.Tag != "" {
		n++
	}
	if q.All {
		n++
	}
	if n != 1 {
		return errors.New("name the devices with exactly one of peers (a list), tag (key=value) or all (true)")
	}
	if q.Tag != "" && !tagRE.MatchString(q.Tag) {
		return fmt.Errorf("tag %q: want key=value (a key of 1-64 letters, digits, . _ -)", httpapi.TruncateUTF8(q.Tag, 100))
	}
	if len(q.Peers) > maxDevices {
		return fmt.Errorf("%d peers: a rollout takes at most %d devices", len(q.Peers), maxDevices)
	}
	seen := make(map[string]bool, len(q.Peers))
	for _, p := range q.Peers {
		if !identity.ValidPeerID(p) {
			return fmt.Errorf("peers: %q is not a peer_id (1-128 of A-Z a-z 0-9 . _ @ + -)", httpapi.TruncateUTF8(p, 140))
		}
		if seen[p] {
			return fmt.Errorf("peers: %s is listed twice", p)
		}
		seen[p] = true
	}
	if q.Canary < 0 || q.Canary > maxDevices {
		return fmt.Errorf("canary %d: want 0 to %d", q.Canary, maxDevices)
	}
	if q.Percent < 0 || q.Percent > 100 {
		return fmt.Errorf("percent %d: want 1 to 100 (0: 100)", q.Percent)
	}
	if q.Percent == 0 {
		q.Percent = 100
	}
	if q.GateSeconds < 0 || q.GateSeconds > MaxGateSeconds {
		return fmt.Errorf("gate_seconds %d: want 0 (the device's own) to %d", q.GateSeconds, MaxGateSeconds)
	}
	return checkWindow(q.Window, q.Zone)
}

// Parse decodes and checks a rollout file: one JSON object in valid
// UTF-8 with no unknown field and no key twice, every field within its
// bounds, at most maxDevices devices (0: DefaultMaxDevices), each peer
// once.
func Parse(data []byte, maxDevices int) (*Rollout, error) {
	if maxDevices <= 0 {
		maxDevices = DefaultMaxDevices
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%d bytes, more than a rollout's %d", len(data), maxFileBytes)
	}
	if err := httpapi.CheckBody(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Rollout
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("not a rollout: %v", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	if err := r.check(maxDevices); err != nil {
		return nil, err
	}
	return &r, nil
}

// check is Parse's checks of a decoded rollout.
func (r *Rollout) check(maxDevices int) error {
	if !ValidID(r.ID) {
		return fmt.Errorf("id %q: want ro- and 8 to 32 hex digits", httpapi.TruncateUTF8(r.ID, 60))
	}
	if !identity.ValidPeerID(r.ChannelID) { // channel ids share the peer_id alphabet here
		return fmt.Errorf("channel_id %q is not a channel id", httpapi.TruncateUTF8(r.ChannelID, 140))
	}
	q := Request{Version: r.Version, Target: r.Target, Canary: r.Canary, Percent: r.Percent, GateSeconds: r.GateSeconds, Window: r.Window, Zone: r.Zone}
	if err := q.check(maxDevices); err != nil {
		return err
	}
	if r.Percent == 0 {
		return errors.New("percent 0: a kept rollout has 1 to 100")
	}
	switch r.State {
	case Running, Paused, Done, Aborted:
	default:
		return fmt.Errorf("state %q: want running, paused, done or aborted", httpapi.TruncateUTF8(r.State, 40))
	}
	if (r.State == Paused) != (r.Paused != nil) {
		return errors.New("paused: present exactly when the state is paused")
	}
	if r.Counts != nil {
		return errors.New("counts are computed, not kept")
	}
	if len(r.Devices) == 0 || len(r.Devices) > maxDevices {
		return fmt.Errorf("%d devices: want 1 to %d", len(r.Devices), maxDevices)
	}
	if r.Waves < 1 || r.Waves > len(r.Devices)+1 || r.Wave < -1 || r.Wave >= r.Waves {
		return fmt.Errorf("wave %d of %d waves is out of range for %d devices", r.Wave, r.Waves, len(r.Devices))
	}
	seen := make(map[string]bool, len(r.Devices))
	for i := range r.Devices {
		d := &r.Devices[i]
		switch {
		case !identity.ValidPeerID(d.PeerID):
			return fmt.Errorf("devices[%d]: peer_id %q is not a peer_id", i, httpapi.TruncateUTF8(d.PeerID, 140))
		case seen[d.PeerID]:
			return fmt.Errorf("devices[%d]: peer %s is listed twice", i, d.PeerID)
		case !validDeviceState(d.State):
			return fmt.Errorf("devices[%d] (%s): state %q is not a device state", i, d.PeerID, httpapi.TruncateUTF8(d.State, 40))
		case d.Was != "" && (!validDeviceState(d.Was) || d.State != Offline):
			return fmt.Errorf("devices[%d] (%s): was %q only for an offline device", i, d.PeerID, httpapi.TruncateUTF8(d.Was, 40))
		case d.Wave < -1 || d.Wave >= r.Waves:
			return fmt.Errorf("devices[%d] (%s): wave %d of %d", i, d.PeerID, d.Wave, r.Waves)
		case d.Platform != "" && release.CheckPlatform(d.Platform) != nil:
			return fmt.Errorf("devices[%d] (%s): %v", i, d.PeerID, release.CheckPlatform(d.Platform))
		case d.Attempt < 0 || d.Attempt > 1<<20:
			return fmt.Errorf("devices[%d] (%s): attempt %d", i, d.PeerID, d.Attempt)
		case d.Online != nil:
			return fmt.Errorf("devices[%d] (%s): online is read from the registry, not kept", i, d.PeerID)
		case len(d.Reason) > maxReason || len(d.Running) > 64 || len(d.Delivery) > maxReason:
			return fmt.Errorf("devices[%d] (%s): reason, running or delivery too long", i, d.PeerID)
		}
		seen[d.PeerID] = true
	}
	return nil
}

// maxReason bounds a device's reason as kept.
const maxReason = 512
