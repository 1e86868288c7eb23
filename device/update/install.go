package update

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"termlink/internal/durable"
)

// Install puts the binary at staged in place of exe, keeping exe as
// exe+PrevSuffix: a hard link (or, where the file system has none, a
// synced copy) of exe is renamed to EXE.prev, then staged is renamed
// over exe and the directory fsynced. staged must be whole and synced
// already, in exe's directory. At every moment exe names a whole binary,
// the old one or the new one: rename(2) replaces it atomically.
func Install(staged, exe string) error {
	dir := filepath.Dir(exe)
	if filepath.Dir(staged) != dir {
		return fmt.Errorf("install: %s is not beside %s", staged, exe)
	}
	prev, tmp := exe+PrevSuffix, exe+PrevSuffix+".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return diskErr("install", err)
	}
	if _, err := os.Stat(exe); err == nil {
		if err := os.Link(exe, tmp); err != nil {
			if err := CopyFile(exe, tmp); err != nil {
				os.Remove(tmp)
				return diskErr("keeping the previous binary", err)
			}
		}
		if err := os.Rename(tmp, prev); err != nil {
			return diskErr("keeping the previous binary", err)
		}
	}
	if err := os.Rename(staged, exe); err != nil {
		return diskErr("install", err)
	}
	if err := durable.SyncDir(dir); err != nil {
		return diskErr("install", err)
	}
	return nil
}

// CopyFile copies src to dst (0755) and fsyncs it (a release staged
// beside the running binary; the tests stage theirs with it too).
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	return errors.Join(err, out.Close())
}
