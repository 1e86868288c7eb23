package releases

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"termlink/internal/durable"
	"termlink/release"
)

// Files of one release's directory (DirStorage).
const (
	binaryFile   = "binary"
	manifestFile = "release.json"
	uploadFile   = "uploaded.json"
	incomingDir  = ".incoming"
)

// DirStorage is the Storage of one server: a directory (the workspace's
// "releases"), one directory per version and platform holding the
// binary, its manifest and who uploaded it when. An upload is written
// into a directory under .incoming, synced, then renamed into place: a
// refused, failed or truncated upload leaves nothing behind.
type DirStorage struct {
	dir    string
	noSync bool
	log    *slog.Logger
}

var _ Storage = (*DirStorage)(nil)

// NewDirStorage opens (creating) dir and removes what an interrupted
// upload or delete left there.
func NewDirStorage(dir string, noSync bool, log *slog.Logger) (*DirStorage, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("release store: %w", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, incomingDir)); err != nil {
		return nil, fmt.Errorf("release store: clearing unfinished uploads: %w", err)
	}
	return &DirStorage{dir: dir, noSync: noSync, log: log}, nil
}

// Info implements Storage.
func (d *DirStorage) Info() StorageInfo { return StorageInfo{Where: d.dir} }

// Close implements Storage: nothing is held.
func (d *DirStorage) Close() error { return nil }

// Follow implements Storage: the directories there now, then Loaded.
func (d *DirStorage) Follow(_ context.Context, f Feed) error {
	versions, err := os.ReadDir(d.dir)
	if err != nil {
		return fmt.Errorf("release store: %w", err)
	}
	for _, v := range versions {
		if !v.IsDir() || release.CheckVersion(v.Name()) != nil {
			continue
		}
		plats, err := os.ReadDir(filepath.Join(d.dir, v.Name()))
		if err != nil {
			return fmt.Errorf("release store: %w", err)
		}
		for _, p := range plats {
			dir := filepath.Join(d.dir, v.Name(), p.Name())
			r, err := readRecord(dir)
			if err != nil {
				d.log.Warn("release store: a directory that is not a release left alone", "dir", dir, "err", err)
				continue
			}
			r.Key = v.Name() + "/" + p.Name()
			f.Put(r)
		}
	}
	f.Loaded()
	return nil
}

// readRecord reads one release's directory (its manifest, the binary's
// size, who uploaded it when); the Store checks what it says.
func readRecord(dir string) (Record, error) {
	b, err := readBounded(filepath.Join(dir, manifestFile), release.MaxManifestBytes)
	if err != nil {
		return Record{}, err
	}
	fi, err := os.Stat(filepath.Join(dir, binaryFile))
	if err != nil {
		return Record{}, err
	}
	r := Record{Manifest: b, Size: fi.Size(), UploadedAt: fi.ModTime().UTC()}
	if b, err := readBounded(filepath.Join(dir, uploadFile), 4096); err == nil {
		var u uploadInfo
		if json.Unmarshal(b, &u) == nil {
			r.UploadedAt, r.UploadedBy, r.SignatureChecked = u.At, u.By, u.SignatureChecked
		}
	}
	return r, nil
}

// uploadInfo is uploaded.json.
type uploadInfo struct {
	At               time.Time `json:"uploaded_at"`
	By               string    `json:"uploaded_by"`
	SignatureChecked bool      `json:"signature_checked"`
}

// readBounded reads a file of at most max bytes (a longer one is an
// error, not read whole).
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s is longer than %d bytes", filepath.Base(path), max)
	}
	return b, err
}

// Create implements Storage.
func (d *DirStorage) Create(ctx context.Context, r Record, body io.Reader) (Record, error) {
	final := filepath.Join(d.dir, r.Key)
	if _, err := os.Stat(final); err == nil {
		return Record{}, ErrExists
	}
	inc := filepath.Join(d.dir, incomingDir)
	if err := os.MkdirAll(inc, 0o755); err != nil {
		return Record{}, err
	}
	tmp, err := os.MkdirTemp(inc, "up-")
	if err != nil {
		return Record{}, err
	}
	defer os.RemoveAll(tmp) // after the rename: nothing left
	n, err := d.receive(filepath.Join(tmp, binaryFile), body)
	if err != nil {
		return Record{}, err
	}
	r.Size = n
	up, _ := json.Marshal(uploadInfo{At: r.UploadedAt, By: r.UploadedBy, SignatureChecked: r.SignatureChecked})
	for name, data := range map[string][]byte{manifestFile: r.Manifest, uploadFile: append(up, '\n')} {
		if err := writeFile(filepath.Join(tmp, name), data, d.noSync); err != nil {
			return Record{}, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return Record{}, err
	}
	if !d.noSync {
		if err := durable.SyncDir(tmp); err != nil {
			return Record{}, err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return Record{}, ErrExists
		}
		return Record{}, err
	}
	if !d.noSync {
		_ = durable.SyncDir(filepath.Dir(final))
		_ = durable.SyncDir(d.dir)
	}
	return r, nil
}

// receive writes body into path (synced) and says how many bytes.
func (d *DirStorage) receive(path string, body io.Reader) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.Copy(f, body)
	if err != nil {
		return n, err
	}
	if !d.noSync {
		if err := f.Sync(); err != nil {
			return n, err
		}
	}
	return n, f.Close()
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

// Open implements Storage: the file (max is the Store's to check).
func (d *DirStorage) Open(_ context.Context, key string, _ int64) (Binary, error) {
	f, err := os.Open(filepath.Join(d.dir, key, binaryFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	tag := fmt.Sprintf("%d@%d", fi.Size(), fi.ModTime().UnixNano())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		tag = fmt.Sprintf("%d/%d:%s", st.Dev, st.Ino, tag)
	}
	return fileBinary{f, tag}, nil
}

type fileBinary struct {
	*os.File
	tag string
}

func (b fileBinary) Tag() string { return b.tag }

// Delete implements Storage: the directory is renamed away at once, then
// removed (a download in progress finishes from the file it has open).
func (d *DirStorage) Delete(_ context.Context, key string) error {
	inc := filepath.Join(d.dir, incomingDir)
	if err := os.MkdirAll(inc, 0o755); err != nil {
		return err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	gone := filepath.Join(inc, "del-"+hex.EncodeToString(b[:]))
	if err := os.Rename(filepath.Join(d.dir, key), gone); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ErrNotFound
		}
		return err
	}
	_ = os.RemoveAll(gone)
	_ = os.Remove(filepath.Dir(filepath.Join(d.dir, key))) // fails while other platforms of the version remain
	return nil
}
