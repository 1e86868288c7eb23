// Package releases is termserver's store of signed termd releases (issue
// 28): the binaries and manifests (package release) an operator uploads
// with `termrig release upload`, kept in the workspace, one directory per
// version and platform, and the routes that upload, list, serve and
// delete them.
//
// An upload is streamed into a directory under .incoming, its size and
// SHA-256 checked against the manifest as it is read (and the manifest's
// signature against the server's release key, when one is configured),
// then renamed into place: a refused, failed or truncated upload leaves
// nothing behind. A release is never replaced in place: delete it first.
// The store is bounded in bytes and in releases; past either an upload
// is refused with the reason (HTTP 507, or 413 for one binary larger than
// the whole budget). Every upload and delete is an event
// (GET /api/releases/events) and a log line.
//
// Who may do what is the operator guard's (package guard): uploads and
// deletes take the operator role, reads the viewer role. Devices do not
// read here yet (the device-facing download, with a device token, is the
// next step of issue 28).
package releases

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"termlink/internal/durable"
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

// Files of one release's directory.
const (
	binaryFile   = "binary"
	manifestFile = "release.json"
	uploadFile   = "uploaded.json"
	incomingDir  = ".incoming"
)

// Options configure a Store.
type Options struct {
	Dir         string            // where releases are kept (the workspace's "releases")
	PublicKey   ed25519.PublicKey // nil: signatures are not checked at upload (devices always check)
	MaxBytes    int64             // all binaries together; default DefaultMaxBytes
	MaxReleases int               // default DefaultMaxReleases
	NoSync      bool              // skip fsync (tests, benchmarks)
	Log         *slog.Logger
	// Stall bounds how long an upload or a download may make no progress
	// (each read or write of the body pushes the connection's deadline
	// this far); default 30 s.
	Stall time.Duration
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
}

type stored struct {
	Entry
	manifest *release.Manifest
}

// Store is the release store.
type Store struct {
	opt    Options
	events *events.Log

	mu       sync.Mutex
	entries  map[string]*stored // by key(version, platform)
	used     int64              // bytes of the stored binaries
	reserved int64              // bytes of uploads in progress
	inflight map[string]bool    // keys being uploaded
}

// Error is a refusal, with the HTTP status the API answers it with.
type Error = httpapi.StatusError

var refuse = httpapi.Refuse

// key is a release's map key and directory (version/os_arch[_variant]).
func key(version, platform string) string {
	return version + "/" + strings.ReplaceAll(platform, "/", "_")
}

// Open opens (creating) the store in opt.Dir: it loads the releases kept
// there and removes what an interrupted upload or delete left.
func Open(opt Options) (*Store, error) {
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
	s := &Store{opt: opt, events: events.NewLog(256), entries: map[string]*stored{}, inflight: map[string]bool{}}
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("release store: %w", err)
	}
	if err := os.RemoveAll(filepath.Join(opt.Dir, incomingDir)); err != nil {
		return nil, fmt.Errorf("release store: clearing unfinished uploads: %w", err)
	}
	versions, err := os.ReadDir(opt.Dir)
	if err != nil {
		return nil, fmt.Errorf("release store: %w", err)
	}
	for _, v := range versions {
		if !v.IsDir() || release.CheckVersion(v.Name()) != nil {
			continue
		}
		plats, err := os.ReadDir(filepath.Join(opt.Dir, v.Name()))
		if err != nil {
			return nil, fmt.Errorf("release store: %w", err)
		}
		for _, p := range plats {
			dir := filepath.Join(opt.Dir, v.Name(), p.Name())
			e, err := load(dir)
			if err == nil && key(e.Version, e.Platform) != v.Name()+"/"+p.Name() {
				err = fmt.Errorf("its manifest is for %s %s", e.Version, e.Platform)
			}
			if err != nil {
				opt.Log.Warn("release store: a directory that is not a release left alone", "dir", dir, "err", err)
				continue
			}
			s.entries[key(e.Version, e.Platform)] = e
			s.used += e.Size
		}
	}
	return s, nil
}

// load reads one release's directory (its manifest, the binary's size).
func load(dir string) (*stored, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return nil, err
	}
	m, err := release.ParseManifest(b)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(filepath.Join(dir, binaryFile))
	if err != nil {
		return nil, err
	}
	if fi.Size() != m.Size {
		return nil, fmt.Errorf("binary is %d bytes, its manifest says %d", fi.Size(), m.Size)
	}
	e := &stored{Entry: Entry{Version: m.Version, Platform: m.Platform, Size: m.Size, SHA256: m.SHA256, UploadedAt: fi.ModTime().UTC()}, manifest: m}
	if b, err := os.ReadFile(filepath.Join(dir, uploadFile)); err == nil {
		var u struct {
			At               time.Time `json:"uploaded_at"`
			By               string    `json:"uploaded_by"`
			SignatureChecked bool      `json:"signature_checked"`
		}
		if json.Unmarshal(b, &u) == nil {
			e.UploadedAt, e.UploadedBy, e.SignatureChecked = u.At, u.By, u.SignatureChecked
		}
	}
	return e, nil
}

// Events is the store's event log (uploads, deletes, refusals).
func (s *Store) Events() *events.Log { return s.events }

// Usage is the bytes and releases stored and the bounds.
func (s *Store) Usage() (bytes, maxBytes int64, count, maxCount int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, s.opt.MaxBytes, len(s.entries), s.opt.MaxReleases
}

// List is every stored release (of version, when not ""), by version then platform.
func (s *Store) List(version string) []Entry {
	s.mu.Lock()
	out := make([]Entry, 0, len(s.entries))
	for _, e := range s.entries {
		if version == "" || e.Version == version {
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
	if e == nil {
		return nil, false
	}
	return e.manifest, true
}

// OpenBinary opens a release's binary for reading. It stays readable
// until closed, even when the release is deleted meanwhile.
func (s *Store) OpenBinary(version, platform string) (*os.File, Entry, error) {
	s.mu.Lock()
	e := s.entries[key(version, platform)]
	var f *os.File
	var err error
	if e != nil {
		f, err = os.Open(filepath.Join(s.opt.Dir, key(version, platform), binaryFile))
	}
	s.mu.Unlock()
	if e == nil {
		return nil, Entry{}, refuse(404, "no release %s for %s is stored", version, platform)
	}
	if err != nil {
		return nil, Entry{}, err
	}
	return f, e.Entry, nil
}

// reserve takes the room for an upload of m, or says why there is none.
func (s *Store) reserve(m *release.Manifest) error {
	k := key(m.Version, m.Platform)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.entries[k] != nil:
		return refuse(409, "release %s for %s is already stored: a release is never replaced; delete it first", m.Version, m.Platform)
	case s.inflight[k]:
		return refuse(409, "release %s for %s is being uploaded by another request", m.Version, m.Platform)
	case m.Size > s.opt.MaxBytes:
		return refuse(413, "the binary is %d bytes, more than the release store's whole budget of %d bytes (config releases.maxBytes)", m.Size, s.opt.MaxBytes)
	case len(s.entries)+len(s.inflight) >= s.opt.MaxReleases:
		return refuse(507, "the release store holds %d releases, its most (config releases.maxReleases): delete an old release first", len(s.entries)+len(s.inflight))
	case s.used+s.reserved+m.Size > s.opt.MaxBytes:
		return refuse(507, "the release store has %d of %d bytes in use: %d more do not fit (config releases.maxBytes); delete an old release first",
			s.used+s.reserved, s.opt.MaxBytes, m.Size)
	}
	s.inflight[k] = true
	s.reserved += m.Size
	return nil
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
// and the body against m as it streams it to disk. ctx ends the upload.
func (s *Store) Put(ctx context.Context, m *release.Manifest, body io.Reader, by string) (Entry, error) {
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
	inc := filepath.Join(s.opt.Dir, incomingDir)
	if err := os.MkdirAll(inc, 0o755); err != nil {
		return Entry{}, err
	}
	tmp, err := os.MkdirTemp(inc, "up-")
	if err != nil {
		return Entry{}, err
	}
	defer os.RemoveAll(tmp) // after the rename: nothing left
	e := &stored{Entry: Entry{Version: m.Version, Platform: m.Platform, Size: m.Size, SHA256: m.SHA256,
		UploadedAt: time.Now().UTC().Truncate(time.Millisecond), UploadedBy: by, SignatureChecked: checked}, manifest: m}
	if err := s.receive(ctx, filepath.Join(tmp, binaryFile), m, body); err != nil {
		return Entry{}, err
	}
	up, _ := json.Marshal(map[string]any{"uploaded_at": e.UploadedAt, "uploaded_by": by, "signature_checked": checked})
	for name, data := range map[string][]byte{manifestFile: m.Marshal(), uploadFile: append(up, '\n')} {
		if err := writeFile(filepath.Join(tmp, name), data, s.opt.NoSync); err != nil {
			return Entry{}, err
		}
	}
	final := filepath.Join(s.opt.Dir, key(m.Version, m.Platform))
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return Entry{}, err
	}
	if !s.opt.NoSync {
		if err := durable.SyncDir(tmp); err != nil {
			return Entry{}, err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return Entry{}, fmt.Errorf("storing release %s for %s: %w", m.Version, m.Platform, err)
	}
	if !s.opt.NoSync {
		_ = durable.SyncDir(filepath.Dir(final))
		_ = durable.SyncDir(s.opt.Dir)
	}
	s.mu.Lock()
	s.entries[key(m.Version, m.Platform)] = e
	s.used += m.Size
	s.mu.Unlock()
	s.event(EventUploaded, fmt.Sprintf("%s %s by %s: %d bytes, sha256 %s", m.Version, m.Platform, by, m.Size, m.SHA256[:16]))
	s.opt.Log.Info("release stored", "version", m.Version, "platform", m.Platform, "size", m.Size, "sha256", m.SHA256, "by", by, "signature_checked", checked)
	return e.Entry, nil
}

// receive streams body into path, checking it against m: at most m.Size
// bytes are read, and the file is kept only when it has exactly that
// many with m's SHA-256.
func (s *Store) receive(ctx context.Context, path string, m *release.Manifest, body io.Reader) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(fileWriter{f}, h), io.LimitReader(ctxReader{ctx, body}, m.Size+1))
	var we *writeError
	switch {
	case errors.As(err, &we):
		return we.err
	case err != nil:
		return refuse(400, "upload of %s for %s ended after %d of %d bytes (truncated, or the client went away): %v", m.Version, m.Platform, n, m.Size, err)
	case n > m.Size:
		return refuse(422, "the binary is longer than the %d bytes its manifest says", m.Size)
	case n < m.Size:
		return refuse(422, "the binary is %d bytes, its manifest says %d (truncated or another file)", n, m.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != m.SHA256 {
		return refuse(422, "the binary's sha256 is %s, its manifest says %s (another file, or changed after signing)", sum, m.SHA256)
	}
	if !s.opt.NoSync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return f.Close()
}

// writeError marks a failure to write the file (not the client's).
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

// fileWriter marks its errors as writeErrors.
type fileWriter struct{ f *os.File }

func (w fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		err = &writeError{err}
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

func writeFile(path string, data []byte, noSync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && !noSync {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// Delete removes a release, by operator by. A download in progress
// finishes from the file it has open.
func (s *Store) Delete(version, platform, by string) error {
	k := key(version, platform)
	s.mu.Lock()
	e := s.entries[k]
	if e == nil {
		s.mu.Unlock()
		return refuse(404, "no release %s for %s is stored", version, platform)
	}
	inc := filepath.Join(s.opt.Dir, incomingDir)
	err := os.MkdirAll(inc, 0o755)
	var gone string
	if err == nil {
		var b [8]byte
		_, _ = rand.Read(b[:])
		gone = filepath.Join(inc, "del-"+hex.EncodeToString(b[:]))
		err = os.Rename(filepath.Join(s.opt.Dir, k), gone) // gone at once, whatever RemoveAll then takes
	}
	if err == nil {
		delete(s.entries, k)
		s.used -= e.Size
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("deleting release %s for %s: %w", version, platform, err)
	}
	_ = os.RemoveAll(gone)
	_ = os.Remove(filepath.Join(s.opt.Dir, version)) // fails while other platforms of the version remain
	s.event(EventDeleted, fmt.Sprintf("%s %s by %s", version, platform, by))
	s.opt.Log.Info("release deleted", "version", version, "platform", platform, "by", by)
	return nil
}

func (s *Store) event(name, detail string) {
	s.events.Add(events.Event{Event: name, Detail: detail})
}
