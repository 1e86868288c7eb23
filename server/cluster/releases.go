package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/releases"
)

// The release store of the cluster (issue 39) is package releases' Store
// over ReleaseStorage: each release one object of the object store
// termlink_releases (its binary the object's bytes; its manifest and who
// uploaded it when, the object's metadata), so that a release uploaded
// through any node is listed, served and deleted through every node.
// This file is storage only: the signature, the budgets, the checks of a
// record and of a binary's size and SHA-256 before it is served are
// package releases'.
//
// Every node follows the bucket's objects with a watch into its Store's
// list. A node serves a binary from a copy in its workspace (CacheDir),
// fetched from the bucket at the first download (at most the manifest's
// size and one byte more) and hashed by the Store before its first byte
// goes out; a copy is removed when its object is deleted or replaced.

// ReleasesBucket is the object store of the releases; an object's name
// is the release's key (version/os_arch[_variant]).
const ReleasesBucket = "termlink_releases"

// Metadata of a release's object.
const (
	relManifest   = "manifest"
	relUploadedAt = "uploaded_at"
	relUploadedBy = "uploaded_by"
	relSigChecked = "signature_checked"
	relUpload     = "upload" // this upload's own id (undoUpload)
)

// releasesPutGrace is how long an upload whose client went away may
// still take to remove what it wrote to the bucket.
const releasesPutGrace = 30 * time.Second

// ReleasesOptions configure Node.ReleaseStorage.
type ReleasesOptions struct {
	// MaxBytes and MaxReleases are the store's budgets (config
	// "releases"); the bucket is bounded by MaxBytes and the room its
	// chunks' and records' own bytes take, so that JetStream refuses
	// what the budget does not hold even when uploads through two nodes
	// each fit alone (releases.ErrFull).
	MaxBytes    int64
	MaxReleases int
	// CacheDir is where this node keeps the copies it serves (emptied
	// at open).
	CacheDir string
}

// ReleaseStorage is releases.Storage on the object store
// termlink_releases, shared by every node.
type ReleaseStorage struct {
	n     *Node
	log   *slog.Logger
	obs   jetstream.ObjectStore
	cache string
	fetch chan struct{} // one fetch from the bucket at a time

	mu     sync.Mutex
	copies map[string]string    // key -> the path of this node's copy
	gone   map[string]time.Time // key -> when the watch saw its deletion
}

var _ releases.Storage = (*ReleaseStorage)(nil)

// releasesBucketBytes is the bucket's bound for a budget of maxBytes in
// maxReleases: each 128 KiB chunk carries under 100 bytes of its own,
// each object's record a few KiB (a release's and each of its patches').
func releasesBucketBytes(maxBytes int64, maxReleases int) int64 {
	return maxBytes + maxBytes/1024 + int64(maxReleases)*(1+releases.MaxPatchesPerRelease)*16<<10 + 1<<20
}

// ReleaseStorage makes (or updates) the bucket, replicated as the
// cluster's config says, and returns the node's storage on it.
func (n *Node) ReleaseStorage(ctx context.Context, opt ReleasesOptions) (*ReleaseStorage, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = releases.DefaultMaxBytes
	}
	if opt.MaxReleases <= 0 {
		opt.MaxReleases = releases.DefaultMaxReleases
	}
	if opt.CacheDir == "" {
		return nil, errors.New("cluster: the release store needs a directory for its copies")
	}
	if err := os.RemoveAll(opt.CacheDir); err != nil {
		return nil, fmt.Errorf("cluster: release copies: %w", err)
	}
	if err := os.MkdirAll(opt.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: release copies: %w", err)
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	obs, err := ensure(ctx, "object store "+ReleasesBucket, func(ctx context.Context) (jetstream.ObjectStore, error) {
		return n.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: ReleasesBucket,
			Description: "termlink: signed termd releases (binary and manifest), by version and platform",
			MaxBytes:    releasesBucketBytes(opt.MaxBytes, opt.MaxReleases),
			Storage:     jetstream.FileStorage, Replicas: n.cfg.Replicas})
	})
	if err != nil {
		return nil, err
	}
	return &ReleaseStorage{n: n, log: n.log, obs: obs, cache: opt.CacheDir, fetch: make(chan struct{}, 1), copies: map[string]string{},
		gone: map[string]time.Time{}}, nil
}

// OpenReleases returns the cluster's release store: package releases'
// Store over the node's ReleaseStorage, loaded (the bucket's objects)
// before it returns, or an error when ctx ends first (unless
// opt.LoadInBackground: then it goes on loading).
func (n *Node) OpenReleases(ctx context.Context, opt releases.Options, ro ReleasesOptions) (*releases.Store, error) {
	if opt.Log == nil {
		opt.Log = n.log
	}
	ro.MaxBytes, ro.MaxReleases = opt.MaxBytes, opt.MaxReleases
	st, err := n.ReleaseStorage(ctx, ro)
	if err != nil {
		return nil, err
	}
	return releases.New(ctx, st, opt)
}

// Info implements releases.Storage.
func (s *ReleaseStorage) Info() releases.StorageInfo {
	return releases.StorageInfo{Shared: true, Where: "bucket " + ReleasesBucket}
}

// Close implements releases.Storage: the node is its owner's to close.
func (s *ReleaseStorage) Close() error { return nil }

// record is what an object says of its release (the Store checks it).
func releaseRecord(info *jetstream.ObjectInfo) releases.Record {
	r := releases.Record{Key: info.Name, Size: int64(info.Size), UploadedAt: info.ModTime}
	if md := info.Metadata; md != nil {
		r.Manifest = []byte(md[relManifest])
		if t, err := time.Parse(time.RFC3339Nano, md[relUploadedAt]); err == nil {
			r.UploadedAt = t
		}
		r.UploadedBy = md[relUploadedBy]
		r.SignatureChecked = md[relSigChecked] == "true"
	}
	return r
}

// Follow implements releases.Storage: a watch of the bucket's objects,
// made again when it ends, until ctx or the node's own ends. A watch
// made again tells f of what was deleted meanwhile (Gone).
func (s *ReleaseStorage) Follow(ctx context.Context, f releases.Feed) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.n.bgCtx, cancel)
	defer stop()
	known := map[string]bool{}
	loaded := false
	for ctx.Err() == nil {
		w, err := s.obs.Watch(ctx)
		if err != nil {
			if !loaded {
				return fmt.Errorf("cluster: watching bucket %s: %w", ReleasesBucket, err)
			}
			s.log.Warn("cluster: cannot watch the releases; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		s.watch(ctx, w, f, known, &loaded)
		_ = w.Stop()
		for range w.Updates() { // until its closed handler closes it: nothing left blocked sending
		}
	}
	return nil
}

func (s *ReleaseStorage) watch(ctx context.Context, w jetstream.ObjectWatcher, f releases.Feed, known map[string]bool, loaded *bool) {
	seen := map[string]bool{}
	initial := true
	for {
		select {
		case <-ctx.Done():
			return
		case info, ok := <-w.Updates():
			if !ok {
				return
			}
			switch {
			case info == nil:
				if initial {
					initial = false
					for k := range known {
						if !seen[k] {
							delete(known, k)
							s.forget(k)
							f.Gone(k)
						}
					}
					if !*loaded {
						*loaded = true
						f.Loaded()
					}
				}
			case info.Deleted:
				delete(known, info.Name)
				s.forget(info.Name)
				s.mu.Lock()
				s.gone[info.Name] = time.Now()
				s.mu.Unlock()
				f.Gone(info.Name)
			default:
				known[info.Name], seen[info.Name] = true, initial
				s.mu.Lock()
				delete(s.gone, info.Name)
				s.mu.Unlock()
				s.replaced(info.Name, info.NUID)
				f.Put(releaseRecord(info))
			}
		}
	}
}

// Create implements releases.Storage. An upload whose client went away
// (its body's reads fail) still has releasesPutGrace to remove the
// chunks it wrote.
func (s *ReleaseStorage) Create(ctx context.Context, r releases.Record, body io.Reader) (releases.Record, error) {
	if info, err := s.obs.GetInfo(ctx, r.Key); err == nil && !info.Deleted {
		return releases.Record{}, releases.ErrExists
	} else if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return releases.Record{}, fmt.Errorf("cluster: bucket %s: %w", ReleasesBucket, err)
	}
	s.purgeGone(ctx)
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var gmu sync.Mutex
	var grace *time.Timer
	stop := context.AfterFunc(ctx, func() {
		gmu.Lock()
		grace = time.AfterFunc(releasesPutGrace, cancel)
		gmu.Unlock()
	})
	defer func() {
		stop()
		gmu.Lock()
		if grace != nil {
			grace.Stop()
		}
		gmu.Unlock()
		cancel()
	}()
	var idb [12]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	info, err := s.obs.Put(pctx, jetstream.ObjectMeta{Name: r.Key, Description: "termd release",
		Metadata: map[string]string{relManifest: string(r.Manifest), relUploadedAt: r.UploadedAt.UTC().Format(time.RFC3339Nano),
			relUploadedBy: r.UploadedBy, relSigChecked: strconv.FormatBool(r.SignatureChecked), relUpload: id}}, body)
	if err != nil {
		s.undoUpload(pctx, r.Key, id)
		if isMaxBytes(err) {
			return releases.Record{}, fmt.Errorf("%w: bucket %s: %v", releases.ErrFull, ReleasesBucket, err)
		}
		return releases.Record{}, fmt.Errorf("cluster: bucket %s: %w", ReleasesBucket, err)
	}
	got := releaseRecord(info)
	got.UploadedAt = r.UploadedAt
	return got, nil
}

// undoUpload deletes the object of a failed upload when its record was
// stored (a Put whose chunks the bucket refused may still have written
// the record, the small message after them): else every node would list
// a release whose bytes are not there.
func (s *ReleaseStorage) undoUpload(ctx context.Context, key, id string) {
	info, err := s.obs.GetInfo(ctx, key)
	if err == nil && !info.Deleted && info.Metadata[relUpload] == id {
		if err := s.obs.Delete(ctx, key); err != nil {
			s.log.Warn("cluster: a failed upload's record not removed", "key", key, "err", err)
		}
	}
}

// isMaxBytes reports JetStream refusing a write past the bucket's bound.
func isMaxBytes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "maximum bytes exceeded")
}

// Open implements releases.Storage: this node's copy of the object,
// fetched now if it has none of this version of it (at most max+1
// bytes: what is longer is the Store's to refuse).
func (s *ReleaseStorage) Open(ctx context.Context, key string, max int64) (releases.Binary, error) {
	info, err := s.obs.GetInfo(ctx, key)
	if errors.Is(err, jetstream.ErrObjectNotFound) || (err == nil && info.Deleted) {
		return nil, releases.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: bucket %s: %w", ReleasesBucket, err)
	}
	path := s.copyPath(key, info.NUID)
	if f, err := os.Open(path); err == nil {
		return copyBinary{f, info.NUID}, nil
	}
	select {
	case s.fetch <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.fetch }()
	if f, err := os.Open(path); err == nil { // fetched while this one waited
		return copyBinary{f, info.NUID}, nil
	}
	if err := s.fetchCopy(ctx, key, info.NUID, path, max); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return copyBinary{f, info.NUID}, nil
}

// fetchCopy reads object key (of nuid) into path: at most max+1 bytes.
func (s *ReleaseStorage) fetchCopy(ctx context.Context, key, nuid, path string, max int64) error {
	res, err := s.obs.Get(ctx, key)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return releases.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("cluster: bucket %s: object %s: %w", ReleasesBucket, key, err)
	}
	defer res.Close()
	if got, err := res.Info(); err == nil && got.NUID != nuid {
		path = s.copyPath(key, got.NUID) // replaced meanwhile: the caller finds none and asks again
	}
	tmp, err := os.CreateTemp(s.cache, "fetch-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, io.LimitReader(res, max+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster: bucket %s: reading object %s: %w", ReleasesBucket, key, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	s.mu.Lock()
	old := s.copies[key]
	s.copies[key] = path
	s.mu.Unlock()
	if old != "" && old != path {
		_ = os.Remove(old)
	}
	return nil
}

func (s *ReleaseStorage) copyPath(key, nuid string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(s.cache, hex.EncodeToString(sum[:12])+"-"+nuid)
}

// replaced removes this node's copy of key when it is not of nuid.
func (s *ReleaseStorage) replaced(key, nuid string) {
	s.mu.Lock()
	old := s.copies[key]
	if old != "" && old != s.copyPath(key, nuid) {
		delete(s.copies, key)
	} else {
		old = ""
	}
	s.mu.Unlock()
	if old != "" {
		_ = os.Remove(old)
	}
}

// forget removes this node's copy of key (a download that has it open
// reads on).
func (s *ReleaseStorage) forget(key string) {
	s.mu.Lock()
	old := s.copies[key]
	delete(s.copies, key)
	s.mu.Unlock()
	if old != "" {
		_ = os.Remove(old)
	}
}

type copyBinary struct {
	*os.File
	tag string
}

func (b copyBinary) Tag() string { return b.tag }

// Delete implements releases.Storage: the object's chunks are purged
// and its record marked deleted, which every watch then sees (the marks
// are purged later, by purgeGone).
func (s *ReleaseStorage) Delete(ctx context.Context, key string) error {
	err := s.obs.Delete(ctx, key)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return releases.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("cluster: bucket %s: deleting object %s: %w", ReleasesBucket, key, err)
	}
	s.forget(key)
	return nil
}

// releasesGoneKeep is how long a deleted object's record (about a KiB,
// its metadata) stays in the bucket for watchers before purgeGone
// removes it: the bucket's bytes are the releases', not a history of
// every release ever deleted.
const releasesGoneKeep = 10 * time.Minute

// purgeGone removes the records of objects deleted more than
// releasesGoneKeep ago (each node does so at an upload; a purge of one
// already purged is nothing).
func (s *ReleaseStorage) purgeGone(ctx context.Context) {
	var keys []string
	s.mu.Lock()
	for k, at := range s.gone {
		if time.Since(at) > releasesGoneKeep {
			keys = append(keys, k)
			delete(s.gone, k)
		}
	}
	s.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	st, err := s.n.js.Stream(ctx, "OBJ_"+ReleasesBucket)
	if err != nil {
		return
	}
	for _, k := range keys {
		subj := "$O." + ReleasesBucket + ".M." + base64.URLEncoding.EncodeToString([]byte(k))
		if m, err := st.GetLastMsgForSubject(ctx, subj); err == nil && strings.Contains(string(m.Data), `"deleted":true`) {
			// Up to that record only: an upload of the key since stays.
			_ = st.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(m.Sequence+1))
		}
	}
}
