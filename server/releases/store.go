// Package releases is termserver's store of signed termd releases (issue
// 28): the binaries and manifests (package release) an operator uploads
// with `termrig release upload`, and the routes that upload, list, serve
// and delete them.
//
// The rules are written once, in Store, above a small Storage interface
// (storage.go) with two implementations: DirStorage, the workspace's
// files of one server (local.go), and in cluster mode a JetStream object
// store every node shares (cluster.ReleaseStorage), so that a release
// uploaded to any node is listed and served by every node. The contract
// suite releasestest runs against both.
//
// An upload's manifest is checked (and its signature against the
// server's release key, when one is configured) before a byte is
// stored; its body is streamed into the storage through a reader that
// checks its size and SHA-256 against the manifest and fails the write
// at the end when they differ: a refused, failed or truncated upload
// leaves nothing behind. A release is never replaced in place: delete it
// first. The store is bounded in bytes and in releases; past either an
// upload is refused with the reason (HTTP 507, or 413 for one binary
// larger than the whole budget). What a storage gives back is believed
// only after the same checks: a record whose manifest does not parse,
// names another release or another size than its binary's is not listed
// (a warning names it), and a binary's size and SHA-256 are checked
// before its first byte is served (HTTP 500 naming it when they do not
// match). Every upload and delete is an event (GET
// /api/releases/events) and a log line.
//
// Who may do what is the operator guard's (package guard): uploads and
// deletes take the operator role, reads the viewer role. Devices
// download with their own credentials (the root's devicedownload.go).
package releases

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"termlink/release"
	"termlink/server/events"
	"termlink/server/httpapi"
)

// Defaults of the store's bounds (config "releases").
const (
	DefaultMaxBytes    int64 = 1 << 30
	DefaultMaxReleases       = 64
)

// Event names of the release store.
const (
	EventUploaded = "release_uploaded"
	EventDeleted  = "release_deleted"
	EventRefused  = "release_refused"
)

// Options configure a Store.
type Options struct {
	Dir         string            // Open's DirStorage: where releases are kept (the workspace's "releases")
	PublicKey   ed25519.PublicKey // nil: signatures are not checked at upload (devices always check)
	MaxBytes    int64             // all binaries together; default DefaultMaxBytes
	MaxReleases int               // default DefaultMaxReleases
	NoSync      bool              // Open's DirStorage: skip fsync (tests, benchmarks)
	Log         *slog.Logger
	// Stall bounds how long an upload or a download may make no progress
	// (each read or write of the body pushes the connection's deadline
	// this far); default 30 s.
	Stall time.Duration
	// LoadInBackground: when New's ctx ends before the storage's
	// releases are loaded, New returns the store anyway (a warning
	// logged) and it goes on loading; until then every read and write
	// answers Ready's 503. A cluster node's start does not wait on a
	// bucket a loaded NATS is slow to list.
	LoadInBackground bool
}

// Entry is one stored release as the API lists it.
type Entry struct {
	Version          string    `json:"version"`
	Platform         string    `json:"platform"`
	Size             int64     `json:"size"`
	SHA256           string    `json:"sha256"`
	UploadedAt       time.Time `json:"uploaded_at"`
	UploadedBy       string    `json:"uploaded_by,omitempty"`
	SignatureChecked bool      `json:"signature_checked"` // the server had the release key at upload
	// A patch (issue 43) of the release Version for Platform: Size and
	// SHA256 are the patch file's; FromSHA256 the binary it applies to.
	FromSHA256  string `json:"from_sha256,omitempty"`
	FromVersion string `json:"from_version,omitempty"`
}

type stored struct {
	Entry
	manifest *release.Manifest      // a release's
	patch    *release.PatchManifest // a patch's (patch.go)
}

// Store is the release store: its rules over a Storage.
type Store struct {
	opt    Options
	st     Storage
	events *events.Log

	mu       sync.Mutex
	entries  map[string]*stored // by key(version, platform): the releases the Storage holds, checked
	used     int64              // bytes of the stored binaries
	reserved int64              // bytes of this server's uploads in progress
	inflight map[string]bool    // keys this server is uploading
	verified map[string]string  // key -> the sha256 and Binary.Tag whose bytes were hashed
	warned   map[string]string  // key -> the refusal last logged (once each)

	loaded chan struct{}
	stop   context.CancelFunc
	done   chan struct{} // closed when Follow returned
}

// Error is a refusal, with the HTTP status the API answers it with.
type Error = httpapi.StatusError

var refuse = httpapi.Refuse

// key is a release's key in a Storage (and DirStorage's directory):
// version/os_arch[_variant].
func key(version, platform string) string {
	return version + "/" + strings.ReplaceAll(platform, "/", "_")
}

// Open opens (creating) the store of one server in opt.Dir (DirStorage):
// it loads the releases kept there and removes what an interrupted
// upload or delete left.
func Open(opt Options) (*Store, error) {
	st, err := NewDirStorage(opt.Dir, opt.NoSync, opt.Log)
	if err != nil {
		return nil, err
	}
	return New(context.Background(), st, opt)
}

// New is the store over st (opt.Dir and opt.NoSync are DirStorage's):
// it follows st (on a goroutine it owns until Close) and returns once
// st's releases are loaded, or ctx ends (an error).
func New(ctx context.Context, st Storage, opt Options) (*Store, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.MaxReleases <= 0 {
		opt.MaxReleases = DefaultMaxReleases
	}
	if opt.Stall <= 0 {
		opt.Stall = 30 * time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	s := &Store{opt: opt, st: st, events: events.NewLog(256), entries: map[string]*stored{}, inflight: map[string]bool{},
		verified: map[string]string{}, warned: map[string]string{}, loaded: make(chan struct{}), done: make(chan struct{})}
	fctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	var ferr error
	go func() {
		defer close(s.done)
		ferr = st.Follow(fctx, feed{s})
	}()
	select {
	case <-s.loaded:
		return s, nil
	case <-s.done:
		select {
		case <-s.loaded: // a storage of one server returns once loaded
			return s, nil
		default:
		}
		err := ferr
		if err == nil {
			err = errors.New("the storage stopped before it loaded")
		}
		stop()
		return nil, fmt.Errorf("release store %s: %w", st.Info().Where, err)
	case <-ctx.Done():
		if opt.LoadInBackground {
			opt.Log.Warn("the release store is not loaded yet; it loads in the background (until then the releases API, downloads and new rollouts answer 503)",
				"where", st.Info().Where, "err", ctx.Err())
			return s, nil
		}
		stop()
		<-s.done
		return nil, fmt.Errorf("release store %s: not loaded: %w", st.Info().Where, ctx.Err())
	}
}

// Ready is nil once the storage's releases are loaded, else the 503
// refusal every read and write of the store answers until then.
func (s *Store) Ready() error {
	select {
	case <-s.loaded:
		return nil
	default:
		return refuse(503, "the release store (%s) is still loading its releases; try again shortly", s.st.Info().Where)
	}
}

// Close stops following the storage and closes it.
func (s *Store) Close() error {
	s.stop()
	<-s.done
	return s.st.Close()
}

// feed is the Store as the Storage's Feed: every record checked before
// it is listed.
type feed struct{ s *Store }

func (f feed) Put(r Record) {
	s := f.s
	e, err := s.check(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.dropLocked(r.Key)
		if s.warned[r.Key] != err.Error() {
			s.warned[r.Key] = err.Error()
			s.opt.Log.Warn("release store: a stored release refused", "key", r.Key, "where", s.st.Info().Where, "err", err)
		}
		return
	}
	delete(s.warned, r.Key)
	s.setLocked(r.Key, e)
}

func (f feed) Gone(key string) {
	f.s.mu.Lock()
	f.s.dropLocked(key)
	delete(f.s.warned, key)
	f.s.mu.Unlock()
}

func (f feed) Loaded() {
	select {
	case <-f.s.loaded:
	default:
		close(f.s.loaded)
	}
}

func (s *Store) setLocked(k string, e *stored) {
	if old := s.entries[k]; old != nil {
		s.used -= old.Size
	}
	s.entries[k] = e
	s.used += e.Size
}

func (s *Store) dropLocked(k string) {
	if old := s.entries[k]; old != nil {
		s.used -= old.Size
		delete(s.entries, k)
	}
	delete(s.verified, k)
}

// check is what the store believes of a stored record: its manifest
// parses and names the release it is stored as, its binary is the
// manifest's size, and one recorded as checked against the release key
// is signed by the key configured here.
func (s *Store) check(r Record) (*stored, error) {
	if isPatchKey(r.Key) {
		return s.checkPatch(r)
	}
	m, err := release.ParseManifest(r.Manifest)
	if err != nil {
		return nil, fmt.Errorf("stored release %s: %w", r.Key, err)
	}
	if k := key(m.Version, m.Platform); k != r.Key {
		return nil, fmt.Errorf("stored release %s: its manifest is for %s %s", r.Key, m.Version, m.Platform)
	}
	if r.Size != m.Size {
		return nil, fmt.Errorf("stored release %s: its binary is %d bytes, its manifest says %d", r.Key, r.Size, m.Size)
	}
	if r.SignatureChecked && s.opt.PublicKey != nil {
		if err := m.Verify(s.opt.PublicKey); err != nil {
			return nil, fmt.Errorf("stored release %s: recorded as signed with the release key: %v", r.Key, err)
		}
	}
	return &stored{Entry: Entry{Version: m.Version, Platform: m.Platform, Size: m.Size, SHA256: m.SHA256,
		UploadedAt: r.UploadedAt.UTC(), UploadedBy: r.UploadedBy, SignatureChecked: r.SignatureChecked}, manifest: m}, nil
}

// Events is the store's event log (this server's uploads, deletes,
// refusals).
func (s *Store) Events() *events.Log { return s.events }

// Usage is the bytes and releases stored and the bounds.
func (s *Store) Usage() (bytes, maxBytes int64, count, maxCount int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, s.opt.MaxBytes, len(s.entries) - s.patchesLocked(), s.opt.MaxReleases
}

// List is every stored release (of version, when not ""), by version then platform.
func (s *Store) List(version string) []Entry {
	s.mu.Lock()
	out := make([]Entry, 0, len(s.entries))
	for _, e := range s.entries {
		if e.patch == nil && (version == "" || e.Version == version) {
			out = append(out, e.Entry)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Version != out[j].Version {
			return out[i].Version < out[j].Version
		}
		return out[i].Platform < out[j].Platform
	})
	return out
}

// Manifest is the stored manifest of a release.
func (s *Store) Manifest(version, platform string) (*release.Manifest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key(version, platform)]
	if e == nil || e.manifest == nil {
		return nil, false
	}
	return e.manifest, true
}

// OpenBinary opens a release's binary for reading, its size and SHA-256
// checked against its manifest before it is returned (once per copy the
// storage holds: Binary.Tag). It stays readable until closed, even when
// the release is deleted meanwhile.
func (s *Store) OpenBinary(ctx context.Context, version, platform string) (Binary, Entry, error) {
	if err := s.Ready(); err != nil {
		return nil, Entry{}, err
	}
	k := key(version, platform)
	s.mu.Lock()
	e := s.entries[k]
	s.mu.Unlock()
	if e == nil {
		return nil, Entry{}, refuse(404, "no release %s for %s is stored", version, platform)
	}
	b, err := s.st.Open(ctx, k, e.Size)
	if errors.Is(err, ErrNotFound) {
		return nil, Entry{}, refuse(404, "no release %s for %s is stored", version, platform)
	}
	if err != nil {
		return nil, Entry{}, fmt.Errorf("reading release %s for %s: %w", version, platform, err)
	}
	if err := s.verify(k, e, b); err != nil {
		b.Close()
		return nil, Entry{}, err
	}
	return b, e.Entry, nil
}

// verify hashes b (at most one byte past its manifest's size) unless
// this copy was hashed already, and rewinds it.
func (s *Store) verify(k string, e *stored, b Binary) error {
	tag := e.SHA256 + " " + b.Tag()
	s.mu.Lock()
	ok := s.verified[k] == tag
	s.mu.Unlock()
	if ok {
		return nil
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(b, e.Size+1))
	var bad error
	switch {
	case err != nil:
		return fmt.Errorf("reading release %s for %s: %w", e.Version, e.Platform, err)
	case n != e.Size:
		bad = refuse(500, "stored release %s for %s refused: its binary is %s bytes, its manifest says %d (the store's copy is damaged)",
			e.Version, e.Platform, sizeSaid(n, e.Size), e.Size)
	default:
		if sum := hex.EncodeToString(h.Sum(nil)); sum != e.SHA256 {
			bad = refuse(500, "stored release %s for %s refused: its binary's sha256 is %s, its manifest says %s (the store's copy is damaged or was changed)",
				e.Version, e.Platform, sum, e.SHA256)
		}
	}
	if bad != nil {
		s.opt.Log.Error("release store: a stored binary refused", "version", e.Version, "platform", e.Platform, "where", s.st.Info().Where, "err", bad)
		return bad
	}
	if _, err := b.Seek(0, io.SeekStart); err != nil {
		return err
	}
	s.mu.Lock()
	if s.entries[k] == e {
		s.verified[k] = tag
	}
	s.mu.Unlock()
	return nil
}

// sizeSaid is n, or "more than" size when n passed it (what is read
// stops one byte past).
func sizeSaid(n, size int64) string {
	if n > size {
		return fmt.Sprintf("more than %d", size)
	}
	return fmt.Sprint(n)
}

// reserve takes the room for an upload of m, or says why there is none.
func (s *Store) reserve(m *release.Manifest) error {
	k := key(m.Version, m.Platform)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.entries[k] != nil:
		return errExists(m)
	case s.inflight[k]:
		return refuse(409, "release %s for %s is being uploaded by another request", m.Version, m.Platform)
	case m.Size > s.opt.MaxBytes:
		return refuse(413, "the binary is %d bytes, more than the release store's whole budget of %d bytes (config releases.maxBytes)", m.Size, s.opt.MaxBytes)
	case len(s.entries)-s.patchesLocked()+len(s.inflight) >= s.opt.MaxReleases:
		return refuse(507, "the release store holds %d releases, its most (config releases.maxReleases): delete an old release first", len(s.entries)-s.patchesLocked()+len(s.inflight))
	case s.used+s.reserved+m.Size > s.opt.MaxBytes:
		return s.errFullLocked(m)
	}
	s.inflight[k] = true
	s.reserved += m.Size
	return nil
}

func errExists(m *release.Manifest) error {
	return refuse(409, "release %s for %s is already stored: a release is never replaced; delete it first", m.Version, m.Platform)
}

func (s *Store) errFullLocked(m *release.Manifest) error {
	return refuse(507, "the release store has %d of %d bytes in use: %d more do not fit (config releases.maxBytes); delete an old release first",
		s.used+s.reserved, s.opt.MaxBytes, m.Size)
}

func (s *Store) unreserve(m *release.Manifest) {
	s.mu.Lock()
	delete(s.inflight, key(m.Version, m.Platform))
	s.reserved -= m.Size
	s.mu.Unlock()
}

// Put stores the binary read from body as the release m describes, by
// operator by. m must already be parsed (release.ParseManifest); Put
// checks its signature (with a release key configured), the room left,
// and the body against m as it streams it to the storage, which keeps
// nothing of a body that fails the check. ctx ends the upload.
func (s *Store) Put(ctx context.Context, m *release.Manifest, body io.Reader, by string) (Entry, error) {
	if err := s.Ready(); err != nil {
		return Entry{}, err
	}
	checked := false
	if s.opt.PublicKey != nil {
		if err := m.Verify(s.opt.PublicKey); err != nil {
			return Entry{}, refuse(422, "release %s for %s refused: %v (the server's release key, config releases.publicKeyFile)", m.Version, m.Platform, err)
		}
		checked = true
	}
	if err := s.reserve(m); err != nil {
		return Entry{}, err
	}
	defer s.unreserve(m)
	k := key(m.Version, m.Platform)
	r := Record{Key: k, Manifest: m.Marshal(), UploadedAt: time.Now().UTC().Truncate(time.Millisecond), UploadedBy: by, SignatureChecked: checked}
	cr := &checkReader{r: ctxReader{ctx, body}, size: m.Size, sum: m.SHA256, what: "binary", h: sha256.New()}
	got, err := s.st.Create(ctx, r, cr)
	switch {
	case cr.refusal != nil:
		return Entry{}, cr.refusal
	case cr.bodyErr != nil:
		return Entry{}, refuse(400, "upload of %s for %s ended after %d of %d bytes (truncated, or the client went away): %v", m.Version, m.Platform, cr.n, m.Size, cr.bodyErr)
	case errors.Is(err, ErrExists):
		return Entry{}, errExists(m)
	case errors.Is(err, ErrFull):
		s.mu.Lock()
		defer s.mu.Unlock()
		return Entry{}, s.errFullLocked(m)
	case err != nil:
		return Entry{}, fmt.Errorf("storing release %s for %s: %w", m.Version, m.Platform, err)
	case !cr.ok:
		return Entry{}, fmt.Errorf("storing release %s for %s: the storage stopped after %d of %d bytes", m.Version, m.Platform, cr.n, m.Size)
	}
	e, err := s.check(got)
	if err != nil {
		return Entry{}, fmt.Errorf("storing release %s for %s: %w", m.Version, m.Platform, err)
	}
	s.mu.Lock()
	s.setLocked(k, e)
	s.mu.Unlock()
	s.event(EventUploaded, fmt.Sprintf("%s %s by %s: %d bytes, sha256 %s", m.Version, m.Platform, by, m.Size, m.SHA256[:16]))
	s.opt.Log.Info("release stored", "version", m.Version, "platform", m.Platform, "size", m.Size, "sha256", m.SHA256, "by", by,
		"signature_checked", checked, "where", s.st.Info().Where)
	return e.Entry, nil
}

// checkReader is an upload's body as the storage reads it: at most
// m.Size bytes, and at its end exactly that many with m's SHA-256 (else
// the read fails with the refusal); a read error of the body is the
// client's (bodyErr).
type checkReader struct {
	r       io.Reader
	size    int64
	sum     string
	what    string // "binary", "patch"
	h       hash.Hash
	n       int64
	ok      bool  // the body ended, checked
	refusal error // the body is not the manifest's binary
	bodyErr error // the body could not be read (truncated, the client went away)
}

func (c *checkReader) Read(p []byte) (int, error) {
	if c.refusal != nil {
		return 0, c.refusal
	}
	if c.bodyErr != nil {
		return 0, c.bodyErr
	}
	if rest := c.size + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.size {
		c.refusal = refuse(422, "the %s is longer than the %d bytes its manifest says", c.what, c.size)
		return 0, c.refusal
	}
	c.h.Write(p[:n])
	switch {
	case err == io.EOF:
		if c.n < c.size {
			c.refusal = refuse(422, "the %s is %d bytes, its manifest says %d (truncated or another file)", c.what, c.n, c.size)
			return n, c.refusal
		}
		if sum := hex.EncodeToString(c.h.Sum(nil)); sum != c.sum {
			c.refusal = refuse(422, "the %s's sha256 is %s, its manifest says %s (another file, or changed after signing)", c.what, sum, c.sum)
			return n, c.refusal
		}
		c.ok = true
	case err != nil:
		c.bodyErr = err
	}
	return n, err
}

// ctxReader stops reading when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Delete removes a release, by operator by. A download in progress
// finishes from what it has open.
func (s *Store) Delete(ctx context.Context, version, platform, by string) error {
	if err := s.Ready(); err != nil {
		return err
	}
	k := key(version, platform)
	s.mu.Lock()
	e := s.entries[k]
	s.mu.Unlock()
	if e == nil {
		return refuse(404, "no release %s for %s is stored", version, platform)
	}
	err := s.st.Delete(ctx, k)
	if err == nil || errors.Is(err, ErrNotFound) {
		s.mu.Lock()
		s.dropLocked(k)
		s.mu.Unlock()
	}
	if errors.Is(err, ErrNotFound) {
		return refuse(404, "no release %s for %s is stored", version, platform)
	}
	if err != nil {
		return fmt.Errorf("deleting release %s for %s: %w", version, platform, err)
	}
	s.deletePatches(ctx, version, platform, by)
	s.event(EventDeleted, fmt.Sprintf("%s %s by %s", version, platform, by))
	s.opt.Log.Info("release deleted", "version", version, "platform", platform, "by", by, "where", s.st.Info().Where)
	return nil
}

func (s *Store) event(name, detail string) {
	s.events.Add(events.Event{Event: name, Detail: detail})
}
