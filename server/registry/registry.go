// Package registry is the server's device registry: every device that has
// connected to a channel, what it said about itself in connect (name,
// board, version, capabilities, tags), whether it authenticated, whether
// it is online now, since when, when it was last seen, how often it
// reconnected in the last hour, when it last sent a message, and what its
// display shows (the screen mirror, online devices only). Tags pushed
// settings gave a device replace its tags once it acked them (SetTags).
// Changes stream to subscribers (the operator API's live stream).
//
// # Bounds
//
// What a device says of itself is cut to MaxDeviceBytes (JSON as
// written), a screen to MaxScreenBytes. A channel holds at most
// Options.MaxPeers devices and Options.MaxChannelBytes (accounted about
// as stored), of which at most Options.MaxAnonymous did not authenticate
// (no token, client certificate or enrollment). A new anonymous device
// past any of these is refused (a *FullError) and the registry is
// unchanged; a device the registry knows is always taken back.
//
// An authenticated device came with its own credential (an exact token,
// an enrolled token, a list token bound to it, a client certificate) or
// with a shared one: a glob token ("kiosk-*"), which any number of
// holders may use as any matching peer id (Device.Shared). The peers
// of one glob token are counted against it: past Device.SharedMax a new
// peer on it is refused (a *SharedCapError). A new authenticated device
// past MaxPeers or MaxChannelBytes makes room by forgetting the offline
// device seen longest ago, never one with pending notices: anonymous
// ones first, then those of shared credentials, and one with its own
// credential only for another with its own credential. If none can go, a
// device with its own credential grows the channel past the bound (the
// operator issued its credential); one of a shared credential is
// refused (a *FullError).
//
// # Durability
//
// The registry is kept in memory and written behind, incrementally, to
// dir: a log (package wal; CRC per record, torn-tail repair on open) gets
// every FlushInterval the devices that changed since the last flush (a
// connect writes the device, a disconnect or a message only its times),
// and once enough was logged (at least SnapshotBytes and as much as the
// last snapshot) the whole registry is written to snapshot.jsonl (one
// header line, then a device per line; temporary file, fsync, rename) and
// the log is released up to it. Open reads the snapshot, replays the log
// after it, and removes temporary files a kill left. As no connection
// survives a restart, every device is offline when the registry opens.
// A registry of the earlier format (one <channel>.json per channel) is
// read once and replaced by a snapshot.
//
// # Across a cluster
//
// A View answers the same reads (paging, filters, online counts, the
// live stream) over peers kept elsewhere and put into it whole: package
// cluster's mirror of the devices every edge holds. Each edge's Registry
// stays the authority for its own connections and budgets, and tells
// (Options.Forgot) of each device it forgets to make room.
package registry

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"termlink/server/fanout"
	"termlink/server/throttle"
	"termlink/server/wal"
)

// Defaults of Options.
const (
	DefaultFlushInterval   = 2 * time.Second
	DefaultMaxPeers        = 100000   // per channel
	DefaultMaxAnonymous    = 10000    // per channel: devices that did not authenticate
	DefaultMaxChannelBytes = 64 << 20 // per channel, accounted about as stored
	DefaultSnapshotBytes   = 4 << 20  // logged before a snapshot (at least)
	// ScreensPerSecond is how many screen frames a second a peer's mirror
	// takes; more are ignored (a device sends a few a second at most).
	ScreensPerSecond = 10
	// lastSeenEvery is how often the last_seen of online devices is
	// written, so a crash loses little of it.
	lastSeenEvery = time.Minute
)

// Bounds of what a device may say about itself (connect comes from
// unauthenticated devices when a channel has no tokens).
const (
	MaxTags       = 32
	MaxTagKey     = 64
	MaxTagValue   = 128
	MaxField      = 128 // device name, board, version, capability
	MaxCaps       = 32
	MaxScreenRows = 64
	MaxScreenRow  = 256 // bytes
)

// MaxID bounds a channel's and a peer's id the registry keeps (the
// server's connect takes 1-128 characters of A-Z a-z 0-9 . _ @ + -).
const MaxID = 128

// checkID says what is wrong with a channel's or peer's id (what:
// "channel", "peer") for the registry to keep it; nil when nothing.
func checkID(what, id string) error {
	why := ""
	switch {
	case id == "":
		why = "is empty"
	case len(id) > MaxID:
		why = fmt.Sprintf("is %d bytes, longer than %d", len(id), MaxID)
	case !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0:
		why = "is not UTF-8 text without control characters"
	default:
		return nil
	}
	return fmt.Errorf("registry: the %s id %q %s: a device is kept under ids of 1-%d bytes of text", what, truncate(strings.ToValidUTF8(id, "?"), 40), why, MaxID)
}

var tagKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Options tune a Registry.
type Options struct {
	Logger          *slog.Logger
	FlushInterval   time.Duration // write-behind period; default DefaultFlushInterval
	MaxPeers        int           // per channel; default DefaultMaxPeers
	MaxAnonymous    int           // per channel; default DefaultMaxAnonymous
	MaxChannelBytes int           // per channel; default DefaultMaxChannelBytes
	SnapshotBytes   int           // default DefaultSnapshotBytes
	NoSync          bool          // skip fsync (benchmarks)
	// NoticesPending counts a peer's pending notices for Peer.NoticesPending
	// and eviction; nil: 0. It is called with the registry's lock held: it
	// must not call back into the registry.
	NoticesPending func(channelID, peerID string) int
	// Forgot, if set, is told of each device the registry forgets to make
	// room (a cluster's registry deletes its shared copy). It is called
	// with the registry's lock held: it must not call back into it.
	Forgot func(channelID, peerID string)
	// Gate admits the lines devices cause (a device forgotten to make
	// room for another; the server's one gate, Runtime.outside); nil:
	// Logger writes each.
	Gate *throttle.Gate
}

// Device is what a connect frame says, and where it came from.
type Device struct {
	ChannelID  string
	PeerID     string
	SessionID  string
	DeviceName string
	Board      string
	Version    string
	// Platform and SettingsVersion are what the device's connect said
	// (fleet operations): the os/arch[/variant] it runs on and the
	// pushed settings version it applied.
	Platform        string
	SettingsVersion int64
	Capabilities    []string
	Tags            map[string]string
	RemoteAddr      string
	// Authenticated: the connection showed a token, a client certificate
	// or an enrollment's credential. Once a device authenticated, the
	// registry keeps it as such.
	Authenticated bool
	// Shared is the glob ("kiosk-*") whose shared token the device
	// connected with; "" for its own credential or none. SharedMax is
	// how many peers that token may have in the channel (0: no bound);
	// an int32 next to Authenticated, so that the two share a word and
	// an idle device's entry fits 256 bytes (TestIdleEntryHoldsNoExtra).
	// An anonymous connect keeps what the device had.
	SharedMax int32
	Shared    string

	// BinarySHA256 is the running binary's SHA-256 the connect said
	// (issue 43: a rollout sends a patch made from it); "" unless 64
	// lowercase hex digits.
	BinarySHA256 string
}

// Screen is a device's display as its last screen frame showed it.
type Screen struct {
	Rows      []string `json:"rows"`
	ROM       string   `json:"rom,omitempty"` // the HD44780 ROM ("A00", "A02") of an LCD; "": plain text rows
	CursorRow int      `json:"cursor_row"`
	CursorCol int      `json:"cursor_col"`
	CursorOn  bool     `json:"cursor_on"`
	Backlight bool     `json:"backlight"`
	UpdatedAt string   `json:"updated_at"`
}

// Peer is one device as the operator API shows it. Times are RFC 3339 UTC.
type Peer struct {
	PeerID             string            `json:"peer_id"`
	ChannelID          string            `json:"channel_id"`
	SessionID          string            `json:"session_id"`
	DeviceName         string            `json:"device_name"`
	Board              string            `json:"board"`
	Version            string            `json:"version"`
	Capabilities       []string          `json:"capabilities"`
	Tags               map[string]string `json:"tags"`
	Authenticated      bool              `json:"authenticated"`
	Online             bool              `json:"online"`
	ConnectedSince     *string           `json:"connected_since"`
	LastSeen           string            `json:"last_seen"` // now, while online
	RemoteAddr         string            `json:"remote_addr"`
	ReconnectsLastHour int               `json:"reconnects_last_hour"`
	LastMessageAt      *string           `json:"last_message_at"`
	Screen             *Screen           `json:"screen"`
	NoticesPending     int               `json:"notices_pending"`
	// Edge is the cluster node that holds (or last held) the device's
	// connection; empty without a cluster (a View's peers have it).
	Edge string `json:"edge,omitempty"`
	// Platform is the device's os/arch[/variant] (a device that lists
	// "update"); Update its last update's state as it reported it.
	Platform string       `json:"platform,omitempty"`
	Update   *UpdateState `json:"update,omitempty"`
	// SettingsVersion is the pushed settings version the device applied;
	// SettingsError why it did not apply a later one.
	SettingsVersion int64  `json:"settings_version,omitempty"`
	SettingsError   string `json:"settings_error,omitempty"`
	// Busy is whether the device is in use, as it last said on its live
	// connection (issue 42: a device that listed "update"); nil while
	// offline or not said yet on this connection (taken for idle).
	Busy *BusyState `json:"busy,omitempty"`
	// Health is the device's last health report (a device that lists
	// "health"; health.go), kept across its reconnects.
	Health *Health `json:"health,omitempty"`
	// BinarySHA256 is the SHA-256 of the binary the device runs.
	BinarySHA256 string `json:"binary_sha256,omitempty"`
	// Reconnects is what ReconnectsLastHour counts: per minute of the
	// last hour (Unix minute), the reconnects in it. Not shown; a copy
	// of the peer kept elsewhere (a View) counts them when it is read.
	// Replaced, never changed.
	Reconnects [][2]int64 `json:"-"`
}

// UpdateState is a device's last update as it reported it (its
// update_status frame): the release, the state, why it failed, when.
type UpdateState struct {
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	At      string `json:"at"`
}

// BusyState is what a device's busy frame said: in use (and why: run,
// question, keys) or not, its zone's offset from UTC when it knows it,
// and since when (RFC 3339 UTC).
type BusyState struct {
	Busy      bool   `json:"busy"`
	Why       string `json:"why,omitempty"`
	UTCOffset *int   `json:"utc_offset,omitempty"`
	Since     string `json:"since"`
}

// Filter selects peers; the zero Filter selects all.
type Filter struct {
	Tags   map[string]string // every one must match
	Online *bool
}

// FullError is a new anonymous device refused because its channel is
// full; the registry is unchanged.
type FullError struct {
	ChannelID string
	Reason    string
}

func (e *FullError) Error() string {
	return "the device registry of channel " + e.ChannelID + " is full: " + e.Reason +
		"; a device it already knows, or one that authenticates with its own credential (its token, client certificate, enrollment), is still taken"
}

// SharedCapError is a new peer refused because its shared (glob) token
// has its maximum of peers in the channel; the registry is unchanged.
type SharedCapError struct {
	ChannelID, Glob string
	Max             int
}

func (e *SharedCapError) Error() string {
	return fmt.Sprintf("the shared token of %q already has its maximum of %d peers on channel %s (maxPeers of its tokens entry); "+
		"give this device its own token, or have an operator raise maxPeers", e.Glob, e.Max, e.ChannelID)
}

// entry is one device. Its slices and maps are replaced, never changed,
// so a Peer may share them.
//
// What a device that only connects and stays (an online idle device)
// never has is in x, made when first set (extra): an entry without it
// is 352 bytes, not 448.
//
// An entry is what each known device costs, 10,000 of them online and idle
// on a big server: its times are stamps (8 bytes, not time.Time's 24) and
// what an idle device never has is in x, so an entry fits the 256-byte
// size class (TestIdleEntryHoldsNoExtra).
type entry struct {
	dev    Device // Authenticated: ever
	gen    uint64 // of the live connection
	bytes  int32  // accounted in the channel's budget (one device: a few KiB)
	online bool
	// since is when the live connection came while online, and when the
	// device was last seen while offline (a view of an online device
	// shows now as its last_seen): one field for the two.
	since       stamp
	lastMessage stamp
	// rc is the connects after the first, per minute, the last hour; nil
	// for none (an idle device that connected once). A pointer, not the
	// slice: 16 bytes less in every entry (TestIdleEntryHoldsNoExtra).
	rc *[]minuteCount
	x  *entryExtra
}

// reconnects is the entry's connects after the first, per minute, the
// last hour (nil: none).
func (e *entry) reconnects() []minuteCount {
	if e.rc == nil {
		return nil
	}
	return *e.rc
}

// setReconnects keeps rc (addReconnect's new slice, or a stored one).
func (e *entry) setReconnects(rc []minuteCount) {
	switch {
	case len(rc) == 0:
		e.rc = nil
	case e.rc == nil:
		e.rc = &rc
	default:
		*e.rc = rc
	}
}

// lastSeen is when the device was last seen; while it is online, that is
// now, and the caller uses its own now.
func (e *entry) lastSeen() stamp {
	if e.online {
		return 0
	}
	return e.since
}

// stamp is a time as Unix nanoseconds; 0 is the zero time.
type stamp int64

func stampOf(t time.Time) stamp {
	if t.IsZero() {
		return 0
	}
	return stamp(t.UnixNano())
}

// time is s as a time.Time in UTC (the zero time for 0).
func (s stamp) time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(s)).UTC()
}

// entryExtra is what some devices' entries have: a screen and its rate
// window, an update state, a settings error, a busy state, a health
// report.
type entryExtra struct {
	screen        *Screen   // what the live connection shows (not kept)
	screenWindow  time.Time // start of the current one-second window
	screenCount   int
	update        *UpdateState // the last update_status believed (kept, as a reconnect keeps it)
	settingsError string       // why it refused its last pushed settings (kept)
	busy          *BusyState   // what the live connection said of its use (not kept)
	health        *Health      // the last health report (kept; health.go)
	healthGen     uint64       // the connection it came on
	healthAt      time.Time    // when it was taken
}

// noExtra is what an entry without x reads: never written.
var noExtra entryExtra

// ex is e's extra state to read (the zero one if it has none).
func (e *entry) ex() *entryExtra {
	if e.x == nil {
		return &noExtra
	}
	return e.x
}

// extra is e's extra state to write, made if it has none.
func (e *entry) extra() *entryExtra {
	if e.x == nil {
		e.x = &entryExtra{}
	}
	return e.x
}

// clearBusy forgets what the last connection said of its use and
// showed.
func (e *entry) clearBusy() {
	if e.x != nil {
		e.x.busy, e.x.screen = nil, nil
	}
}

// minuteCount is how many reconnects happened in one minute (Unix minute).
type minuteCount = [2]int64

// What a flush must write of a peer.
const (
	dirtySeen = 1 // its times
	dirtyFull = 2 // all of it
)

type channelState struct {
	peers     map[string]*entry
	ids       []string       // sorted peer ids; nil when it must be rebuilt
	bytes     int            // sum of entry.bytes
	anonymous int            // peers never authenticated
	shared    map[string]int // peers per shared (glob) token
	live      fanout.Hub[Peer]
	dirty     map[string]uint8    // peer -> dirtySeen|dirtyFull, since the last flush
	deleted   map[string]struct{} // forgotten since the last flush
}

// Registry is the device registry; safe for concurrent use.
type Registry struct {
	dir string
	opt Options
	log *slog.Logger
	now func() time.Time

	mu       sync.Mutex
	channels map[string]*channelState
	gen      uint64
	lastFull time.Time // last time online devices' last_seen was written

	// Owned by the flusher (writeMu held).
	writeMu   sync.Mutex
	wl        *wal.Log
	sinceSnap int   // bytes logged since the last snapshot
	snapBytes int   // size of the last snapshot
	needSnap  bool  // a log write failed: the next flush writes a snapshot
	walErr    error // the log failed: reopened before the next snapshot

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Open loads the registry kept in dir (created if missing), every device
// offline, and starts writing changes behind. An unreadable snapshot is
// moved aside (name.corrupt-TIME) with a warning; the registry starts
// with what the log holds rather than refusing to start.
func Open(dir string, opt Options) (*Registry, error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.FlushInterval <= 0 {
		opt.FlushInterval = DefaultFlushInterval
	}
	if opt.MaxPeers <= 0 {
		opt.MaxPeers = DefaultMaxPeers
	}
	if opt.MaxAnonymous <= 0 {
		opt.MaxAnonymous = DefaultMaxAnonymous
	}
	if opt.MaxChannelBytes <= 0 {
		opt.MaxChannelBytes = DefaultMaxChannelBytes
	}
	if opt.SnapshotBytes <= 0 {
		opt.SnapshotBytes = DefaultSnapshotBytes
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("registry: creating %s: %w", dir, err)
	}
	r := &Registry{dir: dir, opt: opt, log: opt.Logger, now: time.Now, channels: map[string]*channelState{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := r.load(); err != nil {
		return nil, err
	}
	r.lastFull = r.now()
	go r.flusher()
	return r, nil
}

// Close stops the write-behind, writes what is left (a snapshot when
// anything was logged since the last) and closes the log.
func (r *Registry) Close() error {
	var err error
	r.once.Do(func() {
		close(r.stop)
		<-r.done
		err = r.flush(true)
		r.writeMu.Lock()
		if err == nil && r.sinceSnap > 0 { // the next start reads one file
			err = r.snapshot()
		}
		if cerr := r.wl.Close(); err == nil && cerr != nil && !errors.Is(cerr, wal.ErrFailed) {
			err = fmt.Errorf("registry: closing the log: %w", cerr)
		}
		r.writeMu.Unlock()
	})
	return err
}

func (r *Registry) channel(id string) *channelState {
	cs := r.channels[id]
	if cs == nil {
		cs = &channelState{peers: map[string]*entry{}, shared: map[string]int{}, dirty: map[string]uint8{}, deleted: map[string]struct{}{}}
		r.channels[id] = cs
	}
	return cs
}

// markLocked records that peer must be written (r.mu held).
func (cs *channelState) markLocked(peer string, what uint8) {
	cs.dirty[peer] = max(cs.dirty[peer], what)
}

// smallDirty is how many entries a flushed set may have had and still be
// cleared for reuse; a larger one is let go.
const smallDirty = 64

// resetDirtyLocked empties what changed since the last flush (written
// now). A cleared map keeps its table: one that grew in a burst (a fleet
// connecting at once, 10,000 devices after a restart: about 30 bytes a
// device) would be kept by the idle fleet for good, so a large one is
// let go and a new one made.
func (cs *channelState) resetDirtyLocked() {
	if len(cs.dirty) > smallDirty {
		cs.dirty = map[string]uint8{}
	} else {
		clear(cs.dirty)
	}
	if len(cs.deleted) > smallDirty {
		cs.deleted = map[string]struct{}{}
	} else {
		clear(cs.deleted)
	}
}

// addLocked puts a new entry in the channel (r.mu held).
func (cs *channelState) addLocked(e *entry) {
	cs.peers[e.dev.PeerID] = e
	cs.bytes += int(e.bytes)
	if !e.dev.Authenticated {
		cs.anonymous++
	}
	cs.countShared(e.dev.Shared, 1)
	cs.ids = nil
	delete(cs.deleted, e.dev.PeerID)
}

// countShared adds n to glob's peers ("" counts nothing; r.mu held).
func (cs *channelState) countShared(glob string, n int) {
	if glob == "" {
		return
	}
	if cs.shared[glob] += n; cs.shared[glob] <= 0 {
		delete(cs.shared, glob)
	}
}

// resizeLocked accounts e again after a change of what it holds (r.mu
// held).
func (cs *channelState) resizeLocked(e *entry) {
	x := e.ex()
	size := peerBytes(e.dev) + stateBytes(x.update, x.settingsError) + healthBytes(x.health)
	cs.bytes += size - int(e.bytes)
	e.bytes = int32(size)
}

// removeLocked forgets an entry (r.mu held).
func (cs *channelState) removeLocked(id string) {
	e := cs.peers[id]
	if e == nil {
		return
	}
	delete(cs.peers, id)
	cs.bytes -= int(e.bytes)
	if !e.dev.Authenticated {
		cs.anonymous--
	}
	cs.countShared(e.dev.Shared, -1)
	cs.ids = nil
	delete(cs.dirty, id)
	cs.deleted[id] = struct{}{}
}

// sortedIDs is the channel's peer ids in order (r.mu held).
func (cs *channelState) sortedIDs() []string {
	if cs.ids == nil {
		cs.ids = make([]string, 0, len(cs.peers))
		for id := range cs.peers {
			cs.ids = append(cs.ids, id)
		}
		sort.Strings(cs.ids)
	}
	return cs.ids
}

// Connected records a device's connect and returns the generation of its
// connection, which Disconnected and SetScreen take so that a connection
// replaced by a newer one cannot mark the device offline. A channel or
// peer id that is empty, longer than MaxID bytes or not text is refused
// with an error saying which (the server's connect takes less). It returns
// what was dropped from d as invalid or over budget (tags, oversized
// fields), to report. A new anonymous device past the channel's bounds,
// or one of a shared token that cannot make room, is refused with a
// *FullError; a peer new to a shared token that has its SharedMax peers
// with a *SharedCapError; nothing changes then.
func (r *Registry) Connected(d Device) (gen uint64, ignored []string, err error) {
	if err := checkID("channel", d.ChannelID); err != nil {
		return 0, nil, err
	}
	if err := checkID("peer", d.PeerID); err != nil {
		return 0, nil, err
	}
	d, ignored = sanitize(d)
	if !d.Authenticated {
		d.Shared = ""
	}
	size := peerBytes(d)
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	cs := r.channel(d.ChannelID)
	e := cs.peers[d.PeerID]
	if d.Shared != "" && d.SharedMax > 0 && (e == nil || e.dev.Shared != d.Shared) && cs.shared[d.Shared] >= int(d.SharedMax) {
		return 0, ignored, &SharedCapError{ChannelID: d.ChannelID, Glob: d.Shared, Max: int(d.SharedMax)}
	}
	if e == nil {
		if err := r.makeRoom(cs, d, size); err != nil {
			return 0, ignored, err
		}
		e = &entry{dev: d, bytes: int32(size)}
		cs.addLocked(e)
	} else {
		if e.dev.Authenticated && !d.Authenticated {
			d.Authenticated, d.Shared = true, e.dev.Shared
		} else if !e.dev.Authenticated && d.Authenticated {
			cs.anonymous--
		}
		cs.countShared(e.dev.Shared, -1)
		cs.countShared(d.Shared, 1)
		e.setReconnects(addReconnect(e.reconnects(), now))
	}
	r.gen++
	e.dev, e.online, e.gen = d, true, r.gen
	cs.resizeLocked(e)
	e.since = stampOf(now) // connected since (online)
	e.clearBusy()          // said again by the new connection, and the screen: what it showed before is not what it shows now
	cs.markLocked(d.PeerID, dirtyFull)
	r.publishLocked(cs, e)
	return e.gen, ignored, nil
}

// Disconnected records the end of connection gen; it does nothing when a
// newer connection of the device has taken over. The screen mirror goes
// with the connection.
func (r *Registry) Disconnected(channelID, peerID string, gen uint64) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	cs := r.channels[channelID]
	if cs == nil || cs.peers[peerID] == nil || cs.peers[peerID].gen != gen || !cs.peers[peerID].online {
		return
	}
	e := cs.peers[peerID]
	e.online, e.since = false, stampOf(now) // last seen (offline)
	e.clearBusy()
	cs.markLocked(peerID, dirtySeen)
	r.publishLocked(cs, e)
}

// MessageAccepted records that the device's message was accepted now.
// It is written with the once-a-minute write of online devices (a device
// that sends is online), not at once.
func (r *Registry) MessageAccepted(channelID, peerID string) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if cs := r.channels[channelID]; cs != nil {
		if e := cs.peers[peerID]; e != nil {
			e.lastMessage = stampOf(now)
			if !e.online { // an online device's last_seen is now; since is its connect
				e.since = stampOf(now)
			}
		}
	}
}

// SetScreen keeps s as what connection gen's device shows now (latest
// wins). It reports false when it was ignored: more than ScreensPerSecond
// this second, or not from the device's live connection.
func (r *Registry) SetScreen(channelID, peerID string, gen uint64, s Screen) bool {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	cs := r.channels[channelID]
	if cs == nil || cs.peers[peerID] == nil || cs.peers[peerID].gen != gen || !cs.peers[peerID].online {
		return false
	}
	e := cs.peers[peerID]
	x := e.extra()
	if now.Sub(x.screenWindow) >= time.Second || now.Before(x.screenWindow) {
		x.screenWindow, x.screenCount = now, 0
	}
	if x.screenCount >= ScreensPerSecond {
		return false
	}
	x.screenCount++
	s = sanitizeScreen(s)
	s.UpdatedAt = formatTime(now)
	x.screen = &s
	r.publishLocked(cs, e)
	return true
}

// SetUpdate keeps u (At is set here) as the device's last update state
// and tells subscribers; false when the device is not known.
func (r *Registry) SetUpdate(channelID, peerID string, u UpdateState) bool {
	u = boundUpdate(u)
	u.At = formatTime(r.now())
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entryLocked(channelID, peerID)
	if e == nil {
		return false
	}
	cs := r.channels[channelID]
	e.extra().update = &u
	cs.resizeLocked(e)
	cs.markLocked(peerID, dirtyFull)
	r.publishLocked(cs, e)
	return true
}

// SetBusy keeps b (Since set here when the state changed) as whether the
// online device is in use and tells subscribers; false when the device
// is not known or not online. Why is bounded to MaxField bytes, the
// offset to a day. It is not written to the registry's file: a device
// says it again on every connect.
func (r *Registry) SetBusy(channelID, peerID string, b BusyState) bool {
	b.Why = truncate(strings.ToValidUTF8(b.Why, "?"), MaxField)
	if b.UTCOffset != nil {
		o := max(-86400, min(86400, *b.UTCOffset))
		b.UTCOffset = &o
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entryLocked(channelID, peerID)
	if e == nil || !e.online {
		return false
	}
	b.Since = formatTime(now)
	if old := e.ex().busy; old != nil && old.Busy == b.Busy && old.Why == b.Why {
		b.Since = old.Since
	}
	e.extra().busy = &b
	r.publishLocked(r.channels[channelID], e)
	return true
}

// boundUpdate bounds an update state: version and state to MaxField,
// the reason to MaxReason bytes, each valid UTF-8.
func boundUpdate(u UpdateState) UpdateState {
	u.Version = truncate(strings.ToValidUTF8(u.Version, "?"), MaxField)
	u.State = truncate(strings.ToValidUTF8(u.State, "?"), MaxField)
	u.Reason = boundReason(u.Reason)
	u.At = truncate(strings.ToValidUTF8(u.At, "?"), MaxField)
	return u
}

// boundReason bounds a reason the registry keeps to MaxReason bytes of
// valid UTF-8.
func boundReason(s string) string { return truncate(strings.ToValidUTF8(s, "?"), MaxReason) }

// SetSettings records a device's settings_ack: version applied (errText
// empty) or refused (errText says why; the applied version stays); both
// are written with the device. False when the device is not known.
func (r *Registry) SetSettings(channelID, peerID string, version int64, errText string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entryLocked(channelID, peerID)
	if e == nil {
		return false
	}
	cs := r.channels[channelID]
	errText = boundReason(errText)
	changed := e.ex().settingsError != errText
	if changed {
		e.extra().settingsError = errText
	}
	if errText == "" && e.dev.SettingsVersion != version {
		e.dev.SettingsVersion = version
		changed = true
	}
	if changed {
		cs.resizeLocked(e)
		cs.markLocked(peerID, dirtyFull)
	}
	r.publishLocked(cs, e)
	return true
}

// SetTags replaces a device's tags (pushed settings that set them, once
// the device acked: its next connect says the same), bounded as a
// connect's; false when the device is not known.
func (r *Registry) SetTags(channelID, peerID string, tags map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entryLocked(channelID, peerID)
	if e == nil {
		return false
	}
	cs := r.channels[channelID]
	d := e.dev
	d.Tags = tags
	e.dev, _ = sanitize(d)
	cs.resizeLocked(e)
	cs.markLocked(peerID, dirtyFull)
	r.publishLocked(cs, e)
	return true
}

// MaxReason bounds the reasons the registry keeps (an update's failure,
// a settings refusal).
const MaxReason = 512

func (r *Registry) entryLocked(channelID, peerID string) *entry {
	if cs := r.channels[channelID]; cs != nil {
		return cs.peers[peerID]
	}
	return nil
}

// Changed tells subscribers that something the registry shows of a peer
// but does not keep (its pending notices) changed.
func (r *Registry) Changed(channelID, peerID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cs := r.channels[channelID]; cs != nil {
		if e := cs.peers[peerID]; e != nil {
			r.publishLocked(cs, e)
		}
	}
}

// Get returns one peer.
func (r *Registry) Get(channelID, peerID string) (Peer, bool) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if cs := r.channels[channelID]; cs != nil {
		if e := cs.peers[peerID]; e != nil {
			return r.peerLocked(e, now), true
		}
	}
	return Peer{}, false
}

// List returns the channel's peers that f selects, sorted by peer id. It
// is for the server's own use (a broadcast's targets); the API pages
// with Page.
func (r *Registry) List(channelID string, f Filter) []Peer {
	out, _ := r.Page(channelID, f, "", 0)
	return out
}

// Page returns, in peer id order, at most limit peers (0: all) that f
// selects with a peer id after `after` ("" : from the first), and the
// peer id to pass as after for the next page ("" when there is none).
func (r *Registry) Page(channelID string, f Filter, after string, limit int) (peers []Peer, next string) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	peers = []Peer{}
	cs := r.channels[channelID]
	if cs == nil {
		return peers, ""
	}
	return pageOf(cs.sortedIDs(), after, limit, func(id string) (Peer, bool) {
		e := cs.peers[id]
		if !f.matches(e.online, e.dev.Tags) {
			return Peer{}, false
		}
		return r.peerLocked(e, now), true
	})
}

// pageOf walks ids (sorted) after `after` and returns at most limit (0:
// all) of the peers peer selects, and the id to continue from ("" when
// no more is selected).
func pageOf(ids []string, after string, limit int, peer func(id string) (Peer, bool)) (peers []Peer, next string) {
	peers = []Peer{}
	i := 0
	if after != "" {
		i = sort.SearchStrings(ids, after)
		if i < len(ids) && ids[i] == after {
			i++
		}
	}
	for ; i < len(ids); i++ {
		p, ok := peer(ids[i])
		if !ok {
			continue
		}
		if limit > 0 && len(peers) == limit {
			return peers, peers[len(peers)-1].PeerID // one more matches
		}
		peers = append(peers, p)
	}
	return peers, ""
}

// Count is how many peers the channel holds.
func (r *Registry) Count(channelID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cs := r.channels[channelID]; cs != nil {
		return len(cs.peers)
	}
	return 0
}

// Usage is a channel's use of its bounds.
type Usage struct {
	Peers, Anonymous, Bytes int
}

// Usage returns how much of its bounds the channel uses.
func (r *Registry) Usage(channelID string) Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cs := r.channels[channelID]; cs != nil {
		return Usage{Peers: len(cs.peers), Anonymous: cs.anonymous, Bytes: cs.bytes}
	}
	return Usage{}
}

func (f Filter) matches(online bool, tags map[string]string) bool {
	if f.Online != nil && *f.Online != online {
		return false
	}
	for k, v := range f.Tags {
		if got, ok := tags[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Subscribe streams every change of a channel's peers (connect,
// disconnect, screen, Changed) as the peer's new state, to a subscriber
// that may fall buf changes behind before it is dropped.
func (r *Registry) Subscribe(channelID string, buf int) *fanout.Sub[Peer] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.channel(channelID).live.Subscribe(buf)
}

// OtherTags is the byTag key of Online that counts the online devices
// whose tags did not get a series of their own.
const OtherTags = "other"

// Online counts the channel's online devices: in all, and per tag
// ("key=value") of the authenticated devices only (0 when none of them is
// online), so anonymous devices cannot choose the label set. Past maxTags
// tags, the online devices with a tag left out are counted once under
// OtherTags.
func (r *Registry) Online(channelID string, maxTags int) (total int, byTag map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var c onlineCounter
	if cs := r.channels[channelID]; cs != nil {
		for _, e := range cs.peers {
			c.add(maxTags, e.online, e.dev.Authenticated, e.dev.Tags)
		}
	}
	return c.total, c.tags()
}

// onlineCounter counts online devices as Online says.
type onlineCounter struct {
	total int
	byTag map[string]int
}

func (c *onlineCounter) add(maxTags int, online, authenticated bool, tags map[string]string) {
	if online {
		c.total++
	}
	if !authenticated {
		return
	}
	if c.byTag == nil {
		c.byTag = map[string]int{}
	}
	other := false
	for k, v := range tags {
		t := k + "=" + v
		if _, ok := c.byTag[t]; !ok && len(c.byTag) >= maxTags {
			other = true
			continue
		}
		if online {
			c.byTag[t]++
		} else {
			c.byTag[t] += 0
		}
	}
	if other && online {
		c.byTag[OtherTags]++
	}
}

func (c *onlineCounter) tags() map[string]int {
	if c.byTag == nil {
		return map[string]int{}
	}
	return c.byTag
}

// publishLocked streams e's new state (r.mu held: subscribers see the
// changes in order).
func (r *Registry) publishLocked(cs *channelState, e *entry) {
	if cs.live.Len() > 0 {
		cs.live.Publish(r.peerLocked(e, r.now()))
	}
}

func (r *Registry) peerLocked(e *entry, now time.Time) Peer {
	d, x := e.dev, e.ex()
	p := Peer{PeerID: d.PeerID, ChannelID: d.ChannelID, SessionID: d.SessionID, DeviceName: d.DeviceName,
		Board: d.Board, Version: d.Version, Capabilities: d.Capabilities, Tags: d.Tags, Authenticated: d.Authenticated,
		Online: e.online, LastSeen: formatTime(e.since.time()), RemoteAddr: d.RemoteAddr, Screen: x.screen,
		Platform: d.Platform, Update: x.update, SettingsVersion: d.SettingsVersion, SettingsError: x.settingsError, Busy: x.busy, Health: x.health,
		BinarySHA256: d.BinarySHA256}
	if p.Capabilities == nil {
		p.Capabilities = []string{}
	}
	if p.Tags == nil {
		p.Tags = map[string]string{}
	}
	if e.online {
		p.LastSeen = formatTime(now) // the connection is alive (the server drops silent ones)
		p.ConnectedSince = optTime(e.since.time())
	}
	p.LastMessageAt = optTime(e.lastMessage.time())
	p.Reconnects = e.reconnects()
	p.ReconnectsLastHour = reconnectsLastHour(p.Reconnects, now)
	p.NoticesPending = r.noticesLocked(d.ChannelID, d.PeerID)
	return p
}

func (r *Registry) noticesLocked(channelID, peerID string) int {
	if r.opt.NoticesPending == nil {
		return 0
	}
	return r.opt.NoticesPending(channelID, peerID)
}

// makeRoom admits new device d of size bytes to cs (r.mu held): an
// anonymous one only within every bound, refused otherwise; an
// authenticated one, when the channel is full, by forgetting the offline
// device seen longest ago that has no pending notices and that d may
// displace (rank): anonymous first, then those of shared tokens, then,
// for a device with its own credential only, others with their own.
func (r *Registry) makeRoom(cs *channelState, d Device, size int) error {
	full := func() string {
		switch {
		case len(cs.peers) >= r.opt.MaxPeers:
			return fmt.Sprintf("it holds its maximum of %d devices", r.opt.MaxPeers)
		case cs.bytes+size > r.opt.MaxChannelBytes:
			return fmt.Sprintf("its devices take %d of its %d bytes", cs.bytes, r.opt.MaxChannelBytes)
		}
		return ""
	}
	if !d.Authenticated {
		why := full()
		if why == "" && cs.anonymous >= r.opt.MaxAnonymous {
			why = fmt.Sprintf("it holds its maximum of %d anonymous devices", r.opt.MaxAnonymous)
		}
		if why != "" {
			return &FullError{ChannelID: d.ChannelID, Reason: why}
		}
		return nil
	}
	who := credentialOf(d)
	for why := full(); why != ""; why = full() {
		id := r.evictable(cs, rank(d))
		if id == "" {
			if d.Shared != "" {
				return &FullError{ChannelID: d.ChannelID, Reason: why + ", and a device of a shared token makes room only by forgetting an offline anonymous device or one of a shared token; none is left"}
			}
			r.warn("registry_full", who, "device registry full and nothing can be forgotten (online, or with pending notices): the channel grows past its bound for a device with its own credential",
				"channel", d.ChannelID, "peer_id", d.PeerID, "why", why)
			return nil
		}
		at := cs.peers[id].since.time() // offline: last seen
		cs.removeLocked(id)
		if r.opt.Forgot != nil {
			r.opt.Forgot(d.ChannelID, id)
		}
		r.warn("registry_eviction", who, "device registry full: forgot the offline device seen longest ago to make room for an authenticated one",
			"channel", d.ChannelID, "forgot", id, "last_seen", formatTime(at), "for", d.PeerID, "credential", who, "why", why)
	}
	return nil
}

// What a device's credential lets it displace (rank): a device may
// make room by forgetting one of a lower or equal rank, never higher.
const (
	rankAnonymous = iota
	rankShared    // a glob token: any holder, any matching peer id
	rankOwn       // its own token, enrollment or client certificate
)

func rank(d Device) int {
	switch {
	case !d.Authenticated:
		return rankAnonymous
	case d.Shared != "":
		return rankShared
	}
	return rankOwn
}

// credentialOf names d's credential for a log line's source: its shared
// token's glob, or one source for all devices of their own credential
// (they are the operator's).
func credentialOf(d Device) string {
	if d.Shared != "" {
		return "shared token " + d.Shared
	}
	return "own credential"
}

// warn writes a line the devices cause, through Options.Gate when set.
func (r *Registry) warn(kind, source, msg string, args ...any) {
	if r.opt.Gate != nil {
		r.opt.Gate.Warn(kind, source, msg, args...)
		return
	}
	r.log.Warn(msg, args...)
}

// evictable is the offline device seen longest ago with no pending
// notices among those of rank at most maxRank, the lowest rank first
// (r.mu held); "" if none.
func (r *Registry) evictable(cs *channelState, maxRank int) string {
	var best string
	var bestE *entry
	bestRank := 0
	for id, e := range cs.peers {
		rk := rank(e.dev)
		if e.online || rk > maxRank {
			continue
		}
		if bestE != nil {
			switch {
			case rk > bestRank:
				continue
			case rk == bestRank && e.since >= bestE.since: // offline: last seen
				continue
			}
		}
		if r.noticesLocked(e.dev.ChannelID, id) > 0 {
			continue
		}
		best, bestE, bestRank = id, e, rk
	}
	return best
}

// addReconnect counts a reconnect at now and drops counts older than an
// hour.
func addReconnect(rc []minuteCount, now time.Time) []minuteCount {
	m := now.Unix() / 60
	out := make([]minuteCount, 0, len(rc)+1)
	for _, c := range rc {
		if m-c[0] < 60 {
			out = append(out, c)
		}
	}
	if n := len(out); n > 0 && out[n-1][0] == m {
		out[n-1][1]++
	} else {
		out = append(out, minuteCount{m, 1})
	}
	return out
}

// reconnectsLastHour sums the counts of the last 60 minutes (to the minute).
func reconnectsLastHour(rc []minuteCount, now time.Time) int {
	m := now.Unix() / 60
	n := 0
	for _, c := range rc {
		if age := m - c[0]; age >= 0 && age < 60 {
			n += int(c[1])
		}
	}
	return n
}

// formatTime is RFC 3339 in UTC, to the second.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := formatTime(t)
	return &s
}
