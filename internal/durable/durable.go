// Package durable replaces files so that a crash leaves the old content
// or the new one, never a mix: write a temporary file beside the target,
// fsync it, rename it over the target, fsync the directory.
package durable

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile replaces path with what write writes. With noSync it skips
// the fsyncs (benchmarks and tests): the rename still makes the switch
// whole, but a power cut may lose it.
func WriteFile(path string, write func(*bufio.Writer) error, noSync bool) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // after the rename: nothing there
	w := bufio.NewWriterSize(f, 64<<10)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil && !noSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err == nil && !noSync {
		err = SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs a directory, so a rename or a new file in it survives a
// crash. A file system that cannot sync directories is not an error.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, fs.ErrInvalid) {
		return fmt.Errorf("fsync of directory %s: %w", dir, err)
	}
	return nil
}
