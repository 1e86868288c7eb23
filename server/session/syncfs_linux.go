package session

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes every dirty page and inode of the file system holding f
// with one syncfs(2): for a batch that touched many session files this is
// one journal commit instead of one fsync per file. Since Linux 5.8 it
// reports write-back errors like fsync does.
func syncFS(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			err := unix.Syncfs(int(fd))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				serr = &os.PathError{Op: "syncfs", Path: f.Name(), Err: err}
			}
			return
		}
	}); err != nil {
		return err
	}
	return serr
}

const haveSyncFS = true
