// Package settings keeps the settings an operator pushes to a channel's
// devices (issue 28): documents per tag (key=value: every device with
// that tag) and per peer, each a set of the fields of link.Settings (the
// idle screen's text and delay, the backlight timeout, the notices' time,
// the log level; tags only in a peer's document). Each channel has one
// version, which grows by one on every change.
//
// A device's effective settings are the documents of the tags it has,
// in key=value order (a later one wins per field), then its peer
// document; its tags are those its peer document sets, else the ones its
// connect said. Their version is the channel's: every change is pushed
// (link.Settings, over the session) to every online device of the
// channel that listed "settings", and a device that connects with an
// older settings_version gets them at once. Simple and monotonic: a
// device never sees a version go back, whatever changed while it was
// away; the price is one small frame to every online device per change.
// A field no document sets is left out: the device uses its own value.
//
// Acks (settings_ack) of a version pushed to that device become events
// (settings_applied, or settings_refused with the device's reason, both
// through the server's gate for what comes from outside); the device
// registry keeps the applied version (package server's fleetOps) and,
// once a device acks settings that set its tags, those tags. An ack of
// a version never pushed to it is refused and records nothing (issue
// 36). A peer's document is put only for a peer_id a device could
// connect with (identity.ValidPeerID).
//
// The documents are kept in dir/settings.json (strict parser; written
// whole, atomically, before a change is answered). Bounds: Options.
// MaxDocuments per channel (507 past it), MaxDocumentBytes per document
// (413), and the field bounds of Check.
package settings

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"termlink/internal/durable"
	"termlink/internal/strictjson"
	"termlink/link"
	"termlink/server/httpapi"
	"termlink/server/identity"
	"termlink/server/registry"
	"termlink/server/throttle"
)

// Bounds (the values' own are link.CheckSettings', the device's).
const (
	DefaultMaxDocuments = 1000 // per channel, tags and peers together
	MaxDocumentBytes    = 4096 // one document as stored (JSON)
	MaxPeerID           = 128  // a peer id in a path
	// FileName is the store's file in its dir.
	FileName = "settings.json"
	// maxFileBytes bounds the file read at start.
	maxFileBytes = 256 << 20
)

// Document is one document as kept: the settings it sets (a nil or ""
// field is not set; its Version is the channel's version at its last
// change), when and by whom.
type Document struct {
	link.Settings
	UpdatedAt time.Time `json:"updated_at"`
	UpdatedBy string    `json:"updated_by,omitempty"`
}

// FieldError is a value refused: the field (as the API names it) and why.
type FieldError struct {
	Field, Msg string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Check validates what a document sets (its Version is not looked at);
// forPeer: a peer's document (the only kind that may set tags). The
// error is a *FieldError.
func Check(f link.Settings, forPeer bool) error {
	if f.IdleText == nil && f.IdleSeconds == nil && f.BacklightOffAfter == nil && f.NoticeSeconds == nil && f.LogLevel == "" && f.Tags == nil {
		return &FieldError{"settings", "the document sets nothing: give at least one of idle_text, idle_seconds, backlight_off_after, notice_seconds, log_level" + map[bool]string{true: ", tags", false: ""}[forPeer]}
	}
	if f.Tags != nil {
		if !forPeer {
			return &FieldError{"tags", "only a peer's document may set a device's tags (a tag's document applies to the devices that have the tag)"}
		}
		if len(f.Tags) == 0 {
			return &FieldError{"tags", "is empty: give at least one tag, or leave tags out to keep the device's own"}
		}
		if err := registry.CheckTags(f.Tags); err != nil { // the registry keeps them all
			return &FieldError{"tags", err.Error()}
		}
	}
	f.Version = 1 // the bounds the device holds to too
	if field, msg := link.CheckSettings(&f); field != "" {
		return &FieldError{field, msg}
	}
	return nil
}

// CheckDevicePeerID says why no device could connect with peer_id id
// (nil: one could): the channel's own rule (identity.ValidPeerID, which
// the rollouts use too). A peer's document is put only for such an id.
func CheckDevicePeerID(id string) error {
	if identity.ValidPeerID(id) {
		return nil
	}
	return fmt.Errorf("%s is not a peer_id a device could connect with: 1-128 characters of A-Z a-z 0-9 . _ @ + -, starting with a letter or digit",
		strconv.Quote(httpapi.TruncateUTF8(id, 140)))
}

// CheckPeerID says what is wrong with a peer id in a path (nil: none):
// looser than CheckDevicePeerID, so that a document kept before that
// rule can still be read and deleted.
func CheckPeerID(id string) error {
	switch {
	case id == "":
		return errors.New("the peer id is empty")
	case len(id) > MaxPeerID:
		return fmt.Errorf("the peer id is longer than %d bytes", MaxPeerID)
	case !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0:
		return errors.New("the peer id must be UTF-8 text without control characters")
	}
	return nil
}

// channelDocs are one channel's documents.
type channelDocs struct {
	Version int64                `json:"version"`
	Tags    map[string]*Document `json:"tags"`  // "key=value"
	Peers   map[string]*Document `json:"peers"` // peer id
}

func (c *channelDocs) count() int { return len(c.Tags) + len(c.Peers) }

// file is the store's file.
type file struct {
	Channels map[string]*channelDocs `json:"channels"`
}

// Options tune a Store.
type Options struct {
	Dir          string // where settings.json is kept
	MaxDocuments int    // per channel; default DefaultMaxDocuments
	NoSync       bool
	Log          *slog.Logger
	// Outside is the server's gate for what a device can make it write
	// (package throttle; nil: everything is written).
	Outside *throttle.Gate
}

// Store keeps the documents of every channel; safe for concurrent use.
// Its Fleet side (fleet.go) pushes them; its API (http.go) changes them.
type Store struct {
	opt  Options
	deps Deps
	now  func() time.Time

	// mu guards the documents, the file and every push, so the versions
	// a device is sent never go back (a push reads the documents when it
	// sends).
	mu    sync.Mutex
	chans map[string]*channelDocs

	sent map[string][]int64 // channel\x00peer -> the last versions pushed to it (guarded by mu)

	seenMu sync.Mutex
	seen   map[string]string // channel\x00peer -> the last ack recorded (events once)
}

// ErrFull is a change refused because the channel has MaxDocuments.
var ErrFull = errors.New("settings: the channel's documents are at their bound")

// ErrTooLarge is a document over MaxDocumentBytes.
var ErrTooLarge = errors.New("settings: document too large")

// ErrNotFound is a delete of a document that is not there.
var ErrNotFound = errors.New("settings: no such document")

// Open loads dir/settings.json (none: no documents). A file that does not
// parse is an error naming what is wrong: the operator's settings are not
// silently dropped.
func Open(opt Options, deps Deps) (*Store, error) {
	if opt.MaxDocuments <= 0 {
		opt.MaxDocuments = DefaultMaxDocuments
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	s := &Store{opt: opt, deps: deps, now: time.Now, chans: map[string]*channelDocs{}, seen: map[string]string{}, sent: map[string][]int64{}}
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	path := filepath.Join(opt.Dir, FileName)
	b, err := readBounded(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("settings: %w", err)
	}
	f, err := ParseFile(b)
	if err != nil {
		return nil, fmt.Errorf("settings: %s: %w", path, err)
	}
	s.chans = f.Channels
	return s, nil
}

func readBounded(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFileBytes)
	}
	return b, nil
}

// ParseFile parses a settings file strictly: one JSON object (no key
// twice, valid UTF-8), no unknown field, every document valid (Check),
// within MaxDocumentBytes, its version from 1 to its channel's.
func ParseFile(b []byte) (*file, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("the file is empty")
	}
	if err := httpapi.CheckBody(b); err != nil {
		return nil, errors.New(strings.Replace(err.Error(), "the body", "the file", 1))
	}
	if err := checkFileKeys(b); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f file
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a settings file: %v", err)
	}
	if f.Channels == nil {
		return nil, errors.New(`"channels" is missing`)
	}
	for id, c := range f.Channels {
		if c == nil {
			return nil, fmt.Errorf("channels.%s: null", id)
		}
		if c.Version < 0 {
			return nil, fmt.Errorf("channels.%s.version: negative", id)
		}
		if c.Tags == nil {
			c.Tags = map[string]*Document{}
		}
		if c.Peers == nil {
			c.Peers = map[string]*Document{}
		}
		check := func(where string, d *Document, forPeer bool) error {
			if d == nil {
				return fmt.Errorf("%s: null", where)
			}
			if err := Check(d.Settings, forPeer); err != nil {
				return fmt.Errorf("%s.%v", where, err)
			}
			if d.Version < 1 || d.Version > c.Version {
				return fmt.Errorf("%s.version: %d, want 1 to the channel's %d", where, d.Version, c.Version)
			}
			if n, _ := docBytes(d); n > MaxDocumentBytes {
				return fmt.Errorf("%s: %d bytes, more than %d", where, n, MaxDocumentBytes)
			}
			return nil
		}
		for tag, d := range c.Tags {
			k, v, ok := strings.Cut(tag, "=")
			if !ok {
				return nil, fmt.Errorf("channels.%s.tags.%s: want key=value", id, tag)
			}
			if err := registry.CheckTag(k, v); err != nil {
				return nil, fmt.Errorf("channels.%s.tags.%s: %v", id, tag, err)
			}
			if err := check("channels."+id+".tags."+tag, d, false); err != nil {
				return nil, err
			}
		}
		for peer, d := range c.Peers {
			if err := CheckPeerID(peer); err != nil {
				return nil, fmt.Errorf("channels.%s.peers.%q: %v", id, peer, err)
			}
			if err := check("channels."+id+".peers."+peer, d, true); err != nil {
				return nil, err
			}
		}
	}
	return &f, nil
}

// docKeys are a document's fields as stored.
var docKeys = []string{"idle_text", "idle_seconds", "backlight_off_after", "notice_seconds", "log_level", "tags", "version", "updated_at", "updated_by"}

// checkFileKeys refuses a key that is not a field's exact name
// (encoding/json would take "Idle_Text" for idle_text).
func checkFileKeys(b []byte) error {
	root, err := strictjson.Parse(b)
	if err != nil {
		return err
	}
	known := func(n *strictjson.Node, where string, names ...string) error {
		for _, k := range n.Keys {
			if !slices.Contains(names, k) {
				if where != "" {
					where += ": "
				}
				return fmt.Errorf("%sunknown field %q (known: %s)", where, k, strings.Join(names, ", "))
			}
		}
		return nil
	}
	if err := known(root, "", "channels"); err != nil {
		return err
	}
	for _, chs := range objects(root) {
		for i, c := range objects(chs) {
			where := "channels." + chs.Keys[i]
			if err := known(c, where, "version", "tags", "peers"); err != nil {
				return err
			}
			for j, docs := range objects(c) {
				if c.Keys[j] == "version" {
					continue
				}
				for k, d := range objects(docs) {
					if err := known(d, where+"."+c.Keys[j]+"."+docs.Keys[k], docKeys...); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// objects are n's values (nil for each one that is not an object), by
// n's keys; none when n is not an object.
func objects(n *strictjson.Node) []*strictjson.Node {
	if n.Kind != strictjson.Object {
		return nil
	}
	out := make([]*strictjson.Node, len(n.Vals))
	for i, v := range n.Vals {
		if v.Kind == strictjson.Object {
			out[i] = v
		} else {
			out[i] = &strictjson.Node{Kind: strictjson.Null}
		}
	}
	return out
}

// docBytes is a document's size as stored.
func docBytes(d *Document) (int, error) {
	b, err := json.Marshal(d)
	return len(b), err
}

// writeLocked writes every channel's documents (s.mu held).
func (s *Store) writeLocked(chans map[string]*channelDocs) error {
	return durable.WriteFile(filepath.Join(s.opt.Dir, FileName), func(w *bufio.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(file{Channels: chans})
	}, s.opt.NoSync)
}

// Selector names a document: a tag (Key and Value) or a peer (PeerID).
type Selector struct {
	Key, Value string
	PeerID     string
}

// String is "tag k=v" or "peer P".
func (sel Selector) String() string {
	if sel.PeerID != "" {
		return "peer " + sel.PeerID
	}
	return "tag " + sel.Key + "=" + sel.Value
}

// Change is what a change did: the channel's new version, and how many
// online devices it was pushed to.
type Change struct {
	Version int64 `json:"version"`
	Pushed  int   `json:"pushed"`
}

// Put replaces (or creates) a document and pushes the channel's new
// version. Errors: a *FieldError, ErrFull, ErrTooLarge, or a write's.
func (s *Store) Put(channelID string, sel Selector, f link.Settings, by string) (Change, error) {
	forPeer := sel.PeerID != ""
	if forPeer {
		if err := CheckDevicePeerID(sel.PeerID); err != nil {
			return Change{}, &FieldError{"peer_id", err.Error()}
		}
	}
	if err := Check(f, forPeer); err != nil {
		return Change{}, err
	}
	d := &Document{Settings: f, UpdatedAt: s.now().UTC(), UpdatedBy: by}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chans[channelID]
	if c == nil {
		c = &channelDocs{Tags: map[string]*Document{}, Peers: map[string]*Document{}}
	}
	docs, key := c.Tags, sel.Key+"="+sel.Value
	if forPeer {
		docs, key = c.Peers, sel.PeerID
	}
	if docs[key] == nil && c.count() >= s.opt.MaxDocuments {
		return Change{}, fmt.Errorf("%w: channel %s has %d documents, at most %d (delete one first)", ErrFull, channelID, c.count(), s.opt.MaxDocuments)
	}
	d.Version = c.Version + 1
	if n, err := docBytes(d); err != nil || n > MaxDocumentBytes {
		return Change{}, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, n, MaxDocumentBytes)
	}
	next := s.withLocked(channelID, c, func(nc *channelDocs) {
		if forPeer {
			nc.Peers[key] = d
		} else {
			nc.Tags[key] = d
		}
	})
	if err := s.writeLocked(next); err != nil {
		return Change{}, err
	}
	s.chans = next
	n := s.changedLocked(channelID, sel, "set "+describe(f), by)
	return Change{next[channelID].Version, n}, nil
}

// Delete removes a document and pushes the channel's new version.
func (s *Store) Delete(channelID string, sel Selector, by string) (Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chans[channelID]
	key := sel.Key + "=" + sel.Value
	if sel.PeerID != "" {
		key = sel.PeerID
	}
	if c == nil || (sel.PeerID != "" && c.Peers[key] == nil) || (sel.PeerID == "" && c.Tags[key] == nil) {
		return Change{}, fmt.Errorf("%w: channel %s has no document for %s", ErrNotFound, channelID, sel)
	}
	next := s.withLocked(channelID, c, func(nc *channelDocs) {
		if sel.PeerID != "" {
			delete(nc.Peers, key)
		} else {
			delete(nc.Tags, key)
		}
	})
	if err := s.writeLocked(next); err != nil {
		return Change{}, err
	}
	s.chans = next
	n := s.changedLocked(channelID, sel, "deleted", by)
	return Change{next[channelID].Version, n}, nil
}

// withLocked is a copy of the channels with channelID's copied, its
// version bumped and change applied (documents are never changed in
// place: a failed write leaves the old ones).
func (s *Store) withLocked(channelID string, c *channelDocs, change func(*channelDocs)) map[string]*channelDocs {
	next := maps.Clone(s.chans)
	nc := &channelDocs{Version: c.Version + 1, Tags: maps.Clone(c.Tags), Peers: maps.Clone(c.Peers)}
	change(nc)
	next[channelID] = nc
	return next
}

// describe names the fields a document sets, for events.
func describe(f link.Settings) string {
	var parts []string
	if f.IdleText != nil {
		parts = append(parts, fmt.Sprintf("idle_text=%q", httpapi.TruncateUTF8(*f.IdleText, 40)))
	}
	for _, s := range []struct {
		name string
		p    *int
	}{{"idle_seconds", f.IdleSeconds}, {"backlight_off_after", f.BacklightOffAfter}, {"notice_seconds", f.NoticeSeconds}} {
		if s.p != nil {
			parts = append(parts, fmt.Sprintf("%s=%d", s.name, *s.p))
		}
	}
	if f.LogLevel != "" {
		parts = append(parts, "log_level="+f.LogLevel)
	}
	if f.Tags != nil {
		parts = append(parts, "tags="+tagsText(f.Tags))
	}
	return strings.Join(parts, " ")
}

// tagsText is tags as k=v,... in key order.
func tagsText(tags map[string]string) string {
	keys := slices.Sorted(maps.Keys(tags))
	for i, k := range keys {
		keys[i] = k + "=" + tags[k]
	}
	return strings.Join(keys, ",")
}

// Snapshot is a channel's documents, as the API lists them.
type Snapshot struct {
	Version int64
	Tags    map[string]*Document // "key=value"
	Peers   map[string]*Document
}

// Channel returns a channel's documents (shared: do not change them).
func (s *Store) Channel(channelID string) Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chans[channelID]
	if c == nil {
		return Snapshot{}
	}
	return Snapshot{Version: c.Version, Tags: c.Tags, Peers: c.Peers}
}

// Effective is a device's effective settings: the documents of its tags
// (deviceTags, unless its peer document sets tags: those), in key=value
// order, then its peer document. Sources names the documents used
// ("tag k=v", "peer").
type Effective struct {
	Settings link.Settings
	Sources  []string
}

// Effective computes a device's effective settings in a channel.
func (s *Store) Effective(channelID, peerID string, deviceTags map[string]string) Effective {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effectiveLocked(channelID, peerID, deviceTags)
}

func (s *Store) effectiveLocked(channelID, peerID string, deviceTags map[string]string) Effective {
	var e Effective
	c := s.chans[channelID]
	if c == nil {
		return e
	}
	e.Settings.Version = c.Version
	peer := c.Peers[peerID]
	tags := deviceTags
	if peer != nil && peer.Tags != nil {
		tags = peer.Tags
	}
	names := make([]string, 0, len(tags))
	for k, v := range tags {
		if c.Tags[k+"="+v] != nil {
			names = append(names, k+"="+v)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		merge(&e.Settings, &c.Tags[n].Settings)
		e.Sources = append(e.Sources, "tag "+n)
	}
	if peer != nil {
		merge(&e.Settings, &peer.Settings)
		e.Sources = append(e.Sources, "peer")
	}
	return e
}

// merge sets in dst what f sets (not its version).
func merge(dst *link.Settings, f *link.Settings) {
	if f.IdleText != nil {
		dst.IdleText = f.IdleText
	}
	if f.IdleSeconds != nil {
		dst.IdleSeconds = f.IdleSeconds
	}
	if f.BacklightOffAfter != nil {
		dst.BacklightOffAfter = f.BacklightOffAfter
	}
	if f.NoticeSeconds != nil {
		dst.NoticeSeconds = f.NoticeSeconds
	}
	if f.LogLevel != "" {
		dst.LogLevel = f.LogLevel
	}
	if f.Tags != nil {
		dst.Tags = maps.Clone(f.Tags)
	}
}
