// Package registry is the server's device registry: every device that has
// connected to a channel, what it said about itself in connect (name,
// board, version, capabilities, tags), whether it is online now, since
// when, when it was last seen, how often it reconnected in the last hour,
// when it last sent a message, and what its display shows (the screen
// mirror). It is kept in memory and written behind to one JSON file per
// channel in the workspace (registry/<channel>.json), so a restart keeps
// every device ever seen; as no connection survives a restart, every
// device is offline when the registry opens. Changes stream to
// subscribers (the operator API's live stream).
package registry

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"termlink/internal/durable"
	"termlink/server/fanout"
)

// Defaults of Options.
const (
	DefaultFlushInterval = 2 * time.Second
	DefaultMaxPeers      = 100000 // per channel; past it the longest-unseen offline device is forgotten
	// ScreensPerSecond is how many screen frames a second a peer's mirror
	// takes; more are ignored (a device sends a few a second at most).
	ScreensPerSecond = 10
	// lastSeenEvery is how often the last_seen of online devices is
	// written, so a crash loses little of it.
	lastSeenEvery = time.Minute
	maxReconnects = 3600 // connect times kept for reconnects_last_hour
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

var tagKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Options tune a Registry.
type Options struct {
	Logger        *slog.Logger
	FlushInterval time.Duration // write-behind period; default DefaultFlushInterval
	MaxPeers      int           // per channel; default DefaultMaxPeers
	NoSync        bool          // skip fsync (benchmarks)
	// NoticesPending counts a peer's pending notices for Peer.NoticesPending;
	// nil: 0. It is called with the registry's lock held: it must not call
	// back into the registry.
	NoticesPending func(channelID, peerID string) int
}

// Device is what a connect frame says, and where it came from.
type Device struct {
	ChannelID    string
	PeerID       string
	SessionID    string
	DeviceName   string
	Board        string
	Version      string
	Capabilities []string
	Tags         map[string]string
	RemoteAddr   string
}

// Screen is a device's display as its last screen frame showed it.
type Screen struct {
	Rows      []string `json:"rows"`
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
	Online             bool              `json:"online"`
	ConnectedSince     *string           `json:"connected_since"`
	LastSeen           string            `json:"last_seen"` // now, while online
	RemoteAddr         string            `json:"remote_addr"`
	ReconnectsLastHour int               `json:"reconnects_last_hour"`
	LastMessageAt      *string           `json:"last_message_at"`
	Screen             *Screen           `json:"screen"`
	NoticesPending     int               `json:"notices_pending"`
}

// Filter selects peers; the zero Filter selects all.
type Filter struct {
	Tags   map[string]string // every one must match
	Online *bool
}

// entry is one device. Its slices and maps are replaced, never changed,
// so a Peer may share them.
type entry struct {
	dev            Device
	online         bool
	gen            uint64 // of the live connection
	connectedSince time.Time
	lastSeen       time.Time
	lastMessage    time.Time
	reconnects     []time.Time // connects after the first, oldest first
	screen         *Screen
	screenWindow   time.Time // start of the current one-second window
	screenCount    int
}

type channelState struct {
	peers map[string]*entry
	live  fanout.Hub[Peer]
	dirty bool
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

	writeMu sync.Mutex // one flush at a time
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// Open loads the registry kept in dir (created if missing), every device
// offline, and starts writing changes behind. A file that cannot be read
// is moved aside (name.corrupt-TIME) with a warning; the registry starts
// without it rather than refusing to start.
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

// Close stops the write-behind and writes what is left.
func (r *Registry) Close() error {
	var err error
	r.once.Do(func() {
		close(r.stop)
		<-r.done
		err = r.flush(true)
	})
	return err
}

func (r *Registry) channel(id string) *channelState {
	cs := r.channels[id]
	if cs == nil {
		cs = &channelState{peers: map[string]*entry{}}
		r.channels[id] = cs
	}
	return cs
}

// Connected records a device's connect and returns the generation of its
// connection, which Disconnected and SetScreen take so that a connection
// replaced by a newer one cannot mark the device offline. It returns
// what was dropped from d as invalid (tags, oversized fields), to report.
func (r *Registry) Connected(d Device) (gen uint64, ignored []string) {
	d, ignored = sanitize(d)
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	cs := r.channel(d.ChannelID)
	e := cs.peers[d.PeerID]
	if e == nil {
		r.makeRoom(cs)
		e = &entry{}
		cs.peers[d.PeerID] = e
	} else {
		e.reconnects = append(pruneHour(e.reconnects, now), now)
		if len(e.reconnects) > maxReconnects {
			e.reconnects = e.reconnects[len(e.reconnects)-maxReconnects:]
		}
	}
	r.gen++
	e.dev, e.online, e.gen = d, true, r.gen
	e.connectedSince, e.lastSeen = now, now
	e.screen = nil // what it showed before is not what it shows now
	cs.dirty = true
	r.publishLocked(cs, e)
	return e.gen, ignored
}

// Disconnected records the end of connection gen; it does nothing when a
// newer connection of the device has taken over.
func (r *Registry) Disconnected(channelID, peerID string, gen uint64) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	cs := r.channels[channelID]
	if cs == nil || cs.peers[peerID] == nil || cs.peers[peerID].gen != gen || !cs.peers[peerID].online {
		return
	}
	e := cs.peers[peerID]
	e.online, e.lastSeen = false, now
	cs.dirty = true
	r.publishLocked(cs, e)
}

// MessageAccepted records that the device's message was accepted now.
// It is written with the once-a-minute write of online devices (a device
// that sends is online), not at once: busy devices do not rewrite the
// file every flush.
func (r *Registry) MessageAccepted(channelID, peerID string) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if cs := r.channels[channelID]; cs != nil {
		if e := cs.peers[peerID]; e != nil {
			e.lastMessage, e.lastSeen = now, now
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
	if now.Sub(e.screenWindow) >= time.Second || now.Before(e.screenWindow) {
		e.screenWindow, e.screenCount = now, 0
	}
	if e.screenCount >= ScreensPerSecond {
		return false
	}
	e.screenCount++
	s = sanitizeScreen(s)
	s.UpdatedAt = formatTime(now)
	e.screen = &s
	r.publishLocked(cs, e)
	return true
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

// List returns the channel's peers that f selects, sorted by peer id.
func (r *Registry) List(channelID string, f Filter) []Peer {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []Peer{}
	cs := r.channels[channelID]
	if cs == nil {
		return out
	}
	for _, e := range cs.peers {
		if f.matches(e) {
			out = append(out, r.peerLocked(e, now))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PeerID < out[j].PeerID })
	return out
}

func (f Filter) matches(e *entry) bool {
	if f.Online != nil && *f.Online != e.online {
		return false
	}
	for k, v := range f.Tags {
		if got, ok := e.dev.Tags[k]; !ok || got != v {
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

// Online counts the channel's online devices: in all, and per tag
// ("key=value") of any device the registry knows (0 when none of them is
// online), at most maxTags tags.
func (r *Registry) Online(channelID string, maxTags int) (total int, byTag map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byTag = map[string]int{}
	cs := r.channels[channelID]
	if cs == nil {
		return 0, byTag
	}
	for _, e := range cs.peers {
		for k, v := range e.dev.Tags {
			t := k + "=" + v
			if _, ok := byTag[t]; !ok && len(byTag) >= maxTags {
				continue
			}
			if e.online {
				byTag[t]++
			} else {
				byTag[t] += 0
			}
		}
		if e.online {
			total++
		}
	}
	return total, byTag
}

// publishLocked streams e's new state (r.mu held: subscribers see the
// changes in order).
func (r *Registry) publishLocked(cs *channelState, e *entry) {
	if cs.live.Len() > 0 {
		cs.live.Publish(r.peerLocked(e, r.now()))
	}
}

func (r *Registry) peerLocked(e *entry, now time.Time) Peer {
	d := e.dev
	p := Peer{PeerID: d.PeerID, ChannelID: d.ChannelID, SessionID: d.SessionID, DeviceName: d.DeviceName,
		Board: d.Board, Version: d.Version, Capabilities: d.Capabilities, Tags: d.Tags, Online: e.online,
		LastSeen: formatTime(e.lastSeen), RemoteAddr: d.RemoteAddr, Screen: e.screen}
	if p.Capabilities == nil {
		p.Capabilities = []string{}
	}
	if p.Tags == nil {
		p.Tags = map[string]string{}
	}
	if e.online {
		p.LastSeen = formatTime(now) // the connection is alive (the server drops silent ones)
		p.ConnectedSince = optTime(e.connectedSince)
	}
	p.LastMessageAt = optTime(e.lastMessage)
	for _, t := range e.reconnects {
		if now.Sub(t) < time.Hour {
			p.ReconnectsLastHour++
		}
	}
	if r.opt.NoticesPending != nil {
		p.NoticesPending = r.opt.NoticesPending(d.ChannelID, d.PeerID)
	}
	return p
}

// makeRoom forgets the longest-unseen offline device when the channel is
// full (r.mu held). If every device is online the channel grows past the
// bound: an online device is never forgotten.
func (r *Registry) makeRoom(cs *channelState) {
	if len(cs.peers) < r.opt.MaxPeers {
		return
	}
	var oldest string
	var at time.Time
	for id, e := range cs.peers {
		if !e.online && (oldest == "" || e.lastSeen.Before(at)) {
			oldest, at = id, e.lastSeen
		}
	}
	if oldest != "" {
		delete(cs.peers, oldest)
		r.log.Warn("device registry full: forgot the device seen longest ago", "peer_id", oldest, "last_seen", formatTime(at), "max", r.opt.MaxPeers)
	}
}

func pruneHour(ts []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= time.Hour {
		i++
	}
	return append([]time.Time(nil), ts[i:]...)
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

// ParseTagFilter parses the tag query values of the peers API, each
// "key:value"; all must match.
func ParseTagFilter(values []string) (map[string]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(values))
	for _, v := range values {
		k, val, ok := strings.Cut(v, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("tag %q: want key:value, e.g. tag=site:lobby", truncate(v, 80))
		case checkTagKey(k) != nil:
			return nil, fmt.Errorf("tag %q: %v", truncate(v, 80), checkTagKey(k))
		case checkTagValue(val) != nil:
			return nil, fmt.Errorf("tag %q: %v", truncate(v, 80), checkTagValue(val))
		}
		if prev, dup := out[k]; dup && prev != val {
			return nil, fmt.Errorf("tag %q: key %q is already given as %q; a device has one value per key", truncate(v, 80), k, prev)
		}
		out[k] = val
	}
	return out, nil
}

func checkTagKey(k string) error {
	switch {
	case k == "":
		return errors.New("the key is empty")
	case len(k) > MaxTagKey:
		return fmt.Errorf("the key is longer than %d bytes", MaxTagKey)
	case !tagKeyRE.MatchString(k):
		return errors.New("the key may hold only A-Z a-z 0-9 . _ - and must start with a letter or digit")
	}
	return nil
}

func checkTagValue(v string) error {
	switch {
	case v == "":
		return errors.New("the value is empty")
	case len(v) > MaxTagValue:
		return fmt.Errorf("the value is longer than %d bytes", MaxTagValue)
	case !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0:
		return errors.New("the value must be UTF-8 text without control characters")
	}
	return nil
}

// sanitize bounds what a device says about itself; ignored lists what was
// dropped or cut, for the operator.
func sanitize(d Device) (Device, []string) {
	var ignored []string
	for _, f := range []struct {
		name string
		p    *string
	}{{"device_name", &d.DeviceName}, {"board", &d.Board}, {"version", &d.Version}} {
		if len(*f.p) > MaxField || !utf8.ValidString(*f.p) {
			*f.p = truncate(strings.ToValidUTF8(*f.p, "?"), MaxField)
			ignored = append(ignored, f.name+" cut to "+fmt.Sprint(MaxField)+" bytes")
		}
	}
	caps := make([]string, 0, len(d.Capabilities))
	for _, c := range d.Capabilities {
		if len(caps) >= MaxCaps || len(c) > MaxField {
			ignored = append(ignored, fmt.Sprintf("capability %q", truncate(c, 40)))
			continue
		}
		caps = append(caps, c)
	}
	d.Capabilities = caps
	tags := make(map[string]string, len(d.Tags))
	keys := make([]string, 0, len(d.Tags))
	for k := range d.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := d.Tags[k]
		err := checkTagKey(k)
		if err == nil {
			err = checkTagValue(v)
		}
		if err == nil && len(tags) >= MaxTags {
			err = fmt.Errorf("more than %d tags", MaxTags)
		}
		if err != nil {
			ignored = append(ignored, fmt.Sprintf("tag %q: %v", truncate(k, 40), err))
			continue
		}
		tags[k] = v
	}
	d.Tags = tags
	return d, ignored
}

func sanitizeScreen(s Screen) Screen {
	rows := s.Rows
	if len(rows) > MaxScreenRows {
		rows = rows[:MaxScreenRows]
	}
	out := make([]string, len(rows))
	for i, row := range rows {
		out[i] = truncate(strings.ToValidUTF8(row, "?"), MaxScreenRow)
	}
	s.Rows = out
	return s
}

// truncate cuts s to at most n bytes at a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// stored is one device in a registry file.
type stored struct {
	PeerID        string            `json:"peer_id"`
	SessionID     string            `json:"session_id"`
	DeviceName    string            `json:"device_name,omitempty"`
	Board         string            `json:"board,omitempty"`
	Version       string            `json:"version,omitempty"`
	Capabilities  []string          `json:"capabilities,omitempty"`
	Tags          map[string]string `json:"tags,omitempty"`
	RemoteAddr    string            `json:"remote_addr,omitempty"`
	LastSeen      time.Time         `json:"last_seen"`
	LastMessageAt time.Time         `json:"last_message_at,omitzero"`
	Reconnects    []time.Time       `json:"reconnects,omitempty"`
}

type file struct {
	Version   int      `json:"version"`
	ChannelID string   `json:"channel_id"`
	Peers     []stored `json:"peers"`
}

const fileVersion = 1

func (r *Registry) load() error {
	names, err := filepath.Glob(filepath.Join(r.dir, "*.json"))
	if err != nil {
		return fmt.Errorf("registry: listing %s: %w", r.dir, err)
	}
	for _, name := range names {
		f, err := readFile(name)
		if err != nil {
			aside := name + ".corrupt-" + time.Now().UTC().Format("20060102T150405")
			r.log.Warn("device registry file unreadable; moved aside, its devices are forgotten", "file", name, "moved_to", aside, "err", err)
			if rerr := os.Rename(name, aside); rerr != nil {
				return fmt.Errorf("registry: moving aside unreadable %s: %w", name, rerr)
			}
			continue
		}
		cs := r.channel(f.ChannelID)
		for _, s := range f.Peers {
			d, _ := sanitize(Device{ChannelID: f.ChannelID, PeerID: s.PeerID, SessionID: s.SessionID, DeviceName: s.DeviceName,
				Board: s.Board, Version: s.Version, Capabilities: s.Capabilities, Tags: s.Tags, RemoteAddr: s.RemoteAddr})
			cs.peers[s.PeerID] = &entry{dev: d, lastSeen: s.LastSeen, lastMessage: s.LastMessageAt, reconnects: s.Reconnects}
		}
	}
	return nil
}

func readFile(name string) (*file, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	switch {
	case f.Version != fileVersion:
		return nil, fmt.Errorf("version %d, want %d", f.Version, fileVersion)
	case f.ChannelID == "" || filepath.Base(name) != f.ChannelID+".json":
		return nil, fmt.Errorf("channel_id %q does not match the file name", f.ChannelID)
	}
	for i, p := range f.Peers {
		if p.PeerID == "" {
			return nil, fmt.Errorf("peers[%d]: no peer_id", i)
		}
	}
	return &f, nil
}

func (r *Registry) flusher() {
	defer close(r.done)
	t := time.NewTicker(r.opt.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			if err := r.flush(false); err != nil {
				r.log.Error("writing the device registry", "err", err)
			}
		}
	}
}

// Flush writes the channels changed since the last flush (and, once a
// minute, those with online devices, for their last_seen and
// last_message_at).
func (r *Registry) Flush() error { return r.flush(false) }

// flush is Flush; all writes every channel.
func (r *Registry) flush(all bool) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	now := r.now()
	type job struct {
		id string
		f  file
	}
	var jobs []job
	r.mu.Lock()
	full := now.Sub(r.lastFull) >= lastSeenEvery
	if full {
		r.lastFull = now
	}
	for id, cs := range r.channels {
		online := false
		if full {
			for _, e := range cs.peers {
				if e.online {
					online = true
					break
				}
			}
		}
		if !cs.dirty && !online && !all {
			continue
		}
		cs.dirty = false
		f := file{Version: fileVersion, ChannelID: id, Peers: make([]stored, 0, len(cs.peers))}
		for _, e := range cs.peers {
			seen := e.lastSeen
			if e.online {
				seen = now
			}
			d := e.dev
			f.Peers = append(f.Peers, stored{PeerID: d.PeerID, SessionID: d.SessionID, DeviceName: d.DeviceName, Board: d.Board,
				Version: d.Version, Capabilities: d.Capabilities, Tags: d.Tags, RemoteAddr: d.RemoteAddr, LastSeen: seen.UTC(),
				LastMessageAt: e.lastMessage.UTC(), Reconnects: pruneHour(e.reconnects, now)})
		}
		jobs = append(jobs, job{id, f})
	}
	r.mu.Unlock()
	var errs []error
	for _, j := range jobs {
		sort.Slice(j.f.Peers, func(a, b int) bool { return j.f.Peers[a].PeerID < j.f.Peers[b].PeerID })
		if err := r.write(j.id, &j.f); err != nil {
			errs = append(errs, err)
			r.mu.Lock()
			r.channel(j.id).dirty = true // try again next time
			r.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// write replaces registry/<channel>.json atomically.
func (r *Registry) write(channelID string, f *file) error {
	err := durable.WriteFile(filepath.Join(r.dir, channelID+".json"), func(w *bufio.Writer) error {
		return json.NewEncoder(w).Encode(f)
	}, r.opt.NoSync)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}
