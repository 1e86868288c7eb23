package wal

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync flushes f's data and the metadata needed to read it (its
// size), not its timestamps. A segment is a regular file, which the
// runtime never puts in non-blocking mode, so Fd is harmless here.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err // the caller names the file
		}
	}
}
