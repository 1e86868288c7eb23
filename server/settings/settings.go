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
// registry keeps the applied version (package fleetops) and,
// once a device acks settings that set its tags, those tags. An ack of
// a version never pushed to it is refused and records nothing (issue
// 36). A peer's document is put only for a peer_id a device could
// connect with (identity.ValidPeerID).
//
// The rules are written once, here, above a small Storage (storage.go):
// one record per channel, compare-and-set on its revision, and a feed of
// the changes other writers make. On one server it is the workspace's
// dir/settings.json (LocalStorage: written whole, atomically, before a
// change is answered); in a cluster, package cluster's KV bucket, where
// a change made through any node reaches every node's feed, and each
// node pushes it to the devices connected to it, as it pushes its own
// (every device gets it once, through its own edge). Everything read
// from a store is checked by the strict parser (parseChannel, ParseFile):
// a record that does not parse is refused, naming it, and changes
// nothing. Bounds: Options.MaxDocuments per channel (507 past it),
// MaxDocumentBytes per document (413), the store's MaxRecordBytes per
// channel (507), and the field bounds of Check.
package settings

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

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
	if f.IdleText == nil && f.IdleSeconds == nil && f.BacklightOffAfter == nil && f.NoticeSeconds == nil && f.BusySeconds == nil && f.LogLevel == "" && f.Tags == nil {
		return &FieldError{"settings", "the document sets nothing: give at least one of idle_text, idle_seconds, backlight_off_after, notice_seconds, busy_seconds, log_level" + map[bool]string{true: ", tags", false: ""}[forPeer]}
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
	Dir          string // where settings.json is kept (Open's LocalStorage)
	MaxDocuments int    // per channel; default DefaultMaxDocuments
	NoSync       bool
	Log          *slog.Logger
	// Outside is the server's gate for what a device can make it write
	// (package throttle; nil: everything is written).
	Outside *throttle.Gate
}

// Store keeps the documents of every channel over a Storage; safe for
// concurrent use. Its Fleet side (fleet.go) pushes them; its API
// (http.go) changes them.
type Store struct {
	opt  Options
	deps Deps
	now  func() time.Time
	st   Storage
	info StorageInfo

	// changeMu makes this node's changes one at a time (each a
	// read-modify-write of its channel's record, compare-and-set).
	changeMu sync.Mutex

	// mu guards the documents and every push, so the versions a device
	// is sent never go back (a push reads the documents when it sends).
	mu     sync.Mutex
	chans  map[string]*channelDocs
	revs   map[string]uint64 // the store's revision of each channel's record held
	pushed map[string]int    // how many devices the last apply of a channel's record reached

	sent map[string][]int64 // channel\x00peer -> the last versions pushed to it (guarded by mu)
	// here are the devices that connected here and listed "settings"
	// (channel -> peer -> their connect's tags; guarded by mu), until a
	// push finds them gone; hereCount of them, at most maxSeen.
	here      map[string]map[string]map[string]string
	hereCount int

	seenMu sync.Mutex
	seen   map[string]string // channel\x00peer -> the last ack recorded (events once)

	ready     chan struct{} // closed at the store's first Loaded
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// ErrFull is a change refused because the channel has MaxDocuments (or
// its record would pass the store's MaxRecordBytes).
var ErrFull = errors.New("settings: the channel's documents are at their bound")

// ErrTooLarge is a document over MaxDocumentBytes.
var ErrTooLarge = errors.New("settings: document too large")

// ErrNotFound is a delete of a document that is not there.
var ErrNotFound = errors.New("settings: no such document")

// ErrBusy is a change given up after maxChangeTries compare-and-sets
// lost to other nodes' changes of the same channel.
var ErrBusy = errors.New("settings: the channel's settings kept changing meanwhile; try again")

// maxChangeTries bounds the compare-and-sets of one change.
const maxChangeTries = 16

// Open opens the settings kept in opt.Dir/settings.json (LocalStorage;
// none: no documents). A file that does not parse is an error naming
// what is wrong: the operator's settings are not silently dropped.
func Open(opt Options, deps Deps) (*Store, error) {
	st, err := OpenLocal(opt.Dir, opt.NoSync)
	if err != nil {
		return nil, err
	}
	return New(context.Background(), st, opt, deps)
}

// New returns the settings over st: it follows st (Storage.Follow) on a
// goroutine it owns until Close, and waits for the first load until ctx
// ends (an error then: the store is closed). Every record the feed
// brings is parsed strictly; one that does not parse is logged, naming
// it, and changes nothing. A change the feed brings (another node's)
// is pushed to the devices connected here, as a change made here is.
func New(ctx context.Context, st Storage, opt Options, deps Deps) (*Store, error) {
	if opt.MaxDocuments <= 0 {
		opt.MaxDocuments = DefaultMaxDocuments
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	s := &Store{opt: opt, deps: deps, now: time.Now, st: st, info: st.Info(),
		chans: map[string]*channelDocs{}, revs: map[string]uint64{}, pushed: map[string]int{},
		seen: map[string]string{}, sent: map[string][]int64{}, here: map[string]map[string]map[string]string{}, ready: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	followed := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := st.Follow(s.ctx, &feed{s: s})
		if err != nil && s.ctx.Err() == nil {
			s.opt.Log.Error("settings: the store's feed ended", "err", err)
		}
		followed <- err
	}()
	select {
	case <-s.ready:
		return s, nil
	case err := <-followed:
		select {
		case <-s.ready:
			return s, nil
		default:
		}
		_ = s.Close()
		if err == nil {
			err = errors.New("the store's feed ended before it loaded")
		}
		return nil, fmt.Errorf("settings: %w", err)
	case <-ctx.Done():
		_ = s.Close()
		return nil, fmt.Errorf("settings: the documents were not loaded: %w", ctx.Err())
	}
}

// Close stops following the store and closes it.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.closeErr = s.st.Close()
	})
	return s.closeErr
}

// Shared reports whether other nodes change the documents too (the
// store's Info).
func (s *Store) Shared() bool { return s.info.Shared }

// feed takes a Storage's Follow into the documents.
type feed struct{ s *Store }

func (f *feed) Put(channelID string, value []byte, rev uint64) {
	s := f.s
	c, err := parseChannel(channelID, value)
	if err != nil {
		s.opt.Log.Error("settings: a record in the store is refused (it changes nothing; fix or remove it)",
			"where", s.st.Where(channelID), "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.applyLocked(channelID, c, rev); ok && s.loaded() {
		s.opt.Log.Info("settings changed elsewhere", "channel_id", channelID, "version", c.Version, "pushed", n)
	}
}

func (f *feed) Gone(channelID string, rev uint64) {
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.revs[channelID] {
		return
	}
	s.opt.Log.Warn("settings: a channel's record was removed from the store: its documents are forgotten and its version starts again",
		"channel_id", channelID, "where", s.st.Where(channelID))
	delete(s.chans, channelID)
	delete(s.revs, channelID)
	delete(s.pushed, channelID)
}

func (f *feed) Loaded() {
	select {
	case <-f.s.ready:
	default:
		close(f.s.ready)
	}
}

func (s *Store) loaded() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// applyLocked takes channelID's record at rev into the documents and
// pushes it to the devices connected here (s.mu held): false when the
// documents hold that revision or a later one already (this node's
// change seen again by the feed, or an older one).
func (s *Store) applyLocked(channelID string, c *channelDocs, rev uint64) (int, bool) {
	if rev <= s.revs[channelID] {
		return s.pushed[channelID], false
	}
	s.chans[channelID], s.revs[channelID] = c, rev
	n := s.pushLocked(channelID)
	s.pushed[channelID] = n
	return n, true
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
		if err := checkChannel(id, c); err != nil {
			return nil, err
		}
	}
	return &f, nil
}

// parseChannel parses one channel's record strictly, as ParseFile does
// each channel of the file (the errors name channels.<id>...).
func parseChannel(id string, b []byte) (*channelDocs, error) {
	where := "channels." + id
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("%s: the record is empty", where)
	}
	if err := httpapi.CheckBody(b); err != nil {
		return nil, fmt.Errorf("%s: %s", where, strings.Replace(err.Error(), "the body", "the record", 1))
	}
	root, err := strictjson.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	if root.Kind != strictjson.Object {
		return nil, fmt.Errorf("%s: not a channel's record (want an object)", where)
	}
	if err := checkChannelKeys(root, where); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c channelDocs
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: not a channel's record: %v", where, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: more than one value", where)
	}
	if err := checkChannel(id, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// checkChannel checks one channel's documents (and makes its maps).
func checkChannel(id string, c *channelDocs) error {
	if c == nil {
		return fmt.Errorf("channels.%s: null", id)
	}
	if c.Version < 0 {
		return fmt.Errorf("channels.%s.version: negative", id)
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
			return fmt.Errorf("channels.%s.tags.%s: want key=value", id, tag)
		}
		if err := registry.CheckTag(k, v); err != nil {
			return fmt.Errorf("channels.%s.tags.%s: %v", id, tag, err)
		}
		if err := check("channels."+id+".tags."+tag, d, false); err != nil {
			return err
		}
	}
	for peer, d := range c.Peers {
		if err := CheckPeerID(peer); err != nil {
			return fmt.Errorf("channels.%s.peers.%q: %v", id, peer, err)
		}
		if err := check("channels."+id+".peers."+peer, d, true); err != nil {
			return err
		}
	}
	return nil
}

// docKeys are a document's fields as stored.
var docKeys = []string{"idle_text", "idle_seconds", "backlight_off_after", "notice_seconds", "busy_seconds", "log_level", "tags", "version", "updated_at", "updated_by"}

// checkFileKeys refuses a key that is not a field's exact name
// (encoding/json would take "Idle_Text" for idle_text).
func checkFileKeys(b []byte) error {
	root, err := strictjson.Parse(b)
	if err != nil {
		return err
	}
	if err := knownKeys(root, "", "channels"); err != nil {
		return err
	}
	for _, chs := range objects(root) {
		for i, c := range objects(chs) {
			if err := checkChannelKeys(c, "channels."+chs.Keys[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkChannelKeys refuses a key of a channel's record (at where) that
// is not a field's exact name.
func checkChannelKeys(c *strictjson.Node, where string) error {
	if err := knownKeys(c, where, "version", "tags", "peers"); err != nil {
		return err
	}
	for j, docs := range objects(c) {
		if c.Keys[j] == "version" {
			continue
		}
		for k, d := range objects(docs) {
			if err := knownKeys(d, where+"."+c.Keys[j]+"."+docs.Keys[k], docKeys...); err != nil {
				return err
			}
		}
	}
	return nil
}

// knownKeys refuses a key of n that is not one of names.
func knownKeys(n *strictjson.Node, where string, names ...string) error {
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
// version. Errors: a *FieldError, ErrFull, ErrTooLarge, ErrBusy, or the
// store's.
func (s *Store) Put(ctx context.Context, channelID string, sel Selector, f link.Settings, by string) (Change, error) {
	forPeer := sel.PeerID != ""
	if forPeer {
		if err := CheckDevicePeerID(sel.PeerID); err != nil {
			return Change{}, &FieldError{"peer_id", err.Error()}
		}
	}
	if err := Check(f, forPeer); err != nil {
		return Change{}, err
	}
	at := s.now().UTC()
	return s.change(ctx, channelID, sel, "set "+describe(f), by, func(c *channelDocs) error {
		docs, key := c.Tags, sel.Key+"="+sel.Value
		if forPeer {
			docs, key = c.Peers, sel.PeerID
		}
		if docs[key] == nil && c.count() >= s.opt.MaxDocuments {
			return fmt.Errorf("%w: channel %s has %d documents, at most %d (delete one first)", ErrFull, channelID, c.count(), s.opt.MaxDocuments)
		}
		d := &Document{Settings: f, UpdatedAt: at, UpdatedBy: by}
		d.Version = c.Version
		if n, err := docBytes(d); err != nil || n > MaxDocumentBytes {
			return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, n, MaxDocumentBytes)
		}
		docs[key] = d
		return nil
	})
}

// Delete removes a document and pushes the channel's new version.
func (s *Store) Delete(ctx context.Context, channelID string, sel Selector, by string) (Change, error) {
	return s.change(ctx, channelID, sel, "deleted", by, func(c *channelDocs) error {
		docs, key := c.Tags, sel.Key+"="+sel.Value
		if sel.PeerID != "" {
			docs, key = c.Peers, sel.PeerID
		}
		if docs[key] == nil {
			return fmt.Errorf("%w: channel %s has no document for %s", ErrNotFound, channelID, sel)
		}
		delete(docs, key)
		return nil
	})
}

// change is one change of a channel's documents: edit is applied to a
// copy of them with the version bumped (documents are never changed in
// place: a failed write leaves the old ones), which is written to the
// store by compare-and-set on the revision read; when another writer
// came first, the channel's record is read again at the store and edit
// applied to it, up to maxChangeTries times. The change then reaches
// the devices connected here (those of other nodes through their feed)
// and is an event, here.
func (s *Store) change(ctx context.Context, channelID string, sel Selector, what, by string, edit func(*channelDocs) error) (Change, error) {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	cur, rev := s.chans[channelID], s.revs[channelID]
	s.mu.Unlock()
	for try := 1; ; try++ {
		next := &channelDocs{Tags: map[string]*Document{}, Peers: map[string]*Document{}}
		if cur != nil {
			next = &channelDocs{Version: cur.Version, Tags: maps.Clone(cur.Tags), Peers: maps.Clone(cur.Peers)}
		}
		next.Version++
		if err := edit(next); err != nil {
			return Change{}, err
		}
		b, err := json.Marshal(next)
		if err != nil {
			return Change{}, fmt.Errorf("settings: encoding channel %s: %w", channelID, err)
		}
		if max := s.info.MaxRecordBytes; max > 0 && len(b) > max {
			return Change{}, fmt.Errorf("%w: channel %s's documents would take %d bytes, at most %d in this store (delete one first)", ErrFull, channelID, len(b), max)
		}
		nrev, err := s.st.Put(ctx, channelID, b, rev)
		if errors.Is(err, ErrConflict) {
			if try >= maxChangeTries {
				return Change{}, fmt.Errorf("%w (%d tries)", ErrBusy, try)
			}
			if cur, rev, err = s.read(ctx, channelID); err != nil {
				return Change{}, err
			}
			continue
		}
		if err != nil {
			return Change{}, fmt.Errorf("settings: keeping channel %s's documents: %w", channelID, err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		n, _ := s.applyLocked(channelID, next, nrev)
		s.changedLocked(channelID, next.Version, n, sel, what, by)
		return Change{next.Version, n}, nil
	}
}

// read reads channelID's record at the store, strictly parsed (nil: none).
func (s *Store) read(ctx context.Context, channelID string) (*channelDocs, uint64, error) {
	b, rev, err := s.st.Get(ctx, channelID)
	if err != nil {
		return nil, 0, fmt.Errorf("settings: reading channel %s's documents: %w", channelID, err)
	}
	if rev == 0 {
		return nil, 0, nil
	}
	c, err := parseChannel(channelID, b)
	if err != nil {
		return nil, 0, fmt.Errorf("settings: %s is refused (fix or remove it): %w", s.st.Where(channelID), err)
	}
	return c, rev, nil
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
	}{{"idle_seconds", f.IdleSeconds}, {"backlight_off_after", f.BacklightOffAfter}, {"notice_seconds", f.NoticeSeconds}, {"busy_seconds", f.BusySeconds}} {
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
	if f.BusySeconds != nil {
		dst.BusySeconds = f.BusySeconds
	}
	if f.LogLevel != "" {
		dst.LogLevel = f.LogLevel
	}
	if f.Tags != nil {
		dst.Tags = maps.Clone(f.Tags)
	}
}
