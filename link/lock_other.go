//go:build !unix

package link

import "os"

// lockFile only opens path where flock(2) is not available.
func lockFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

func unlockFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}
