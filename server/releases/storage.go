package releases

import (
	"context"
	"errors"
	"io"
	"time"
)

// Storage is where a Store keeps its releases: bytes and records only.
// Every rule — the signature, the byte and count budgets, the size and
// SHA-256 of a binary against its manifest, what the API answers — is
// the Store's, and the Store believes nothing a Storage gives it without
// those checks (a record whose manifest does not parse, names another
// release, or is not the size of its binary is refused, naming it; a
// binary is hashed before its first byte is served).
//
// Two implementations: DirStorage (the workspace's files, one server) and
// in cluster mode cluster.ReleaseStorage (a JetStream object store every
// node shares). The contract suite releasestest runs against both.
type Storage interface {
	// Info says what kind of storage this is.
	Info() StorageInfo
	// Follow tells f of every release stored (f.Put), then f.Loaded;
	// then, on a shared storage, of every change any node makes (Put,
	// Gone: this one's own too, again), until ctx ends. A storage of one
	// server returns after Loaded. Follow returns what stopped it before
	// Loaded; after, nil.
	Follow(ctx context.Context, f Feed) error
	// Create stores the binary read from body under r (r.Size is not set
	// yet: the storage says what it stored). A read error of body ends it
	// with that error and nothing left. ErrExists when r.Key is there
	// already; ErrFull when the storage's own bound refuses the bytes.
	Create(ctx context.Context, r Record, body io.Reader) (Record, error)
	// Open opens r.Key's binary, reading at most max+1 bytes of it from
	// wherever it is kept (ErrNotFound: it is not stored).
	Open(ctx context.Context, key string, max int64) (Binary, error)
	// Delete removes a release (ErrNotFound: it is not stored). A binary
	// already open stays readable until closed.
	Delete(ctx context.Context, key string) error
	// Close releases what the storage holds (not what its owner does).
	Close() error
}

// StorageInfo describes a Storage.
type StorageInfo struct {
	Shared bool   // other servers write it too (Follow goes on after Loaded)
	Where  string // for log lines and errors: a directory, a bucket
}

// Feed is what Follow tells.
type Feed interface {
	Put(r Record)
	Gone(key string)
	Loaded()
}

// Record is one stored release as a Storage keeps it: nothing in it is
// believed before the Store checked it.
type Record struct {
	Key              string // key(version, platform): version/os_arch[_variant]
	Manifest         []byte // the manifest file's bytes, as signed
	Size             int64  // the bytes the storage holds for the binary
	UploadedAt       time.Time
	UploadedBy       string
	SignatureChecked bool
}

// Binary is an open release binary. Tag names this copy of it (another
// copy stored under the same key has another tag): the Store hashes a
// tag's bytes once.
type Binary interface {
	io.ReadSeekCloser
	Tag() string
}

// Errors of a Storage.
var (
	ErrExists   = errors.New("release: already stored")
	ErrNotFound = errors.New("release: not stored")
	ErrFull     = errors.New("release: the storage's byte bound refuses it")
)
