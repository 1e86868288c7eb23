//go:build unix

package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lockDir takes an exclusive flock on dir/LOCK, so a second process (or
// a second Open in this one) cannot write the same log; the lock goes
// with the process. The holder writes its pid into the file, so the
// refusal can name it (a stale pid left by a dead holder is harmless: the
// flock, not the pid, decides).
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	deadline := time.Now().Add(ownLockWait)
	for wait := 5 * time.Millisecond; ; {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == syscall.EINTR {
			continue
		}
		// Held by this very process: a log closed here a moment ago
		// whose lock file a child between fork and exec still holds (it
		// has a copy of every descriptor until exec closes the CLOEXEC
		// ones; a restart inside one process, as tests do, met it under
		// load). Wait for it briefly; another holder is refused at once.
		if !errors.Is(err, syscall.EWOULDBLOCK) || lockHolder(f) != os.Getpid() || time.Now().After(deadline) {
			break
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
	if err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if pid := lockHolder(f); pid > 0 {
				holder = "process " + strconv.Itoa(pid)
			}
			return nil, fmt.Errorf("wal: %s is open elsewhere: %s holds %s (another termserver on this workspace?)", dir, holder, path)
		}
		return nil, fmt.Errorf("wal: lock %s: %w", path, err)
	}
	// Best effort: the pid only names the holder in another's refusal.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// ownLockWait is how long a lock this process holds is waited for.
var ownLockWait = 2 * time.Second

// lockHolder reads the pid the holder of the lock file wrote (0: none).
func lockHolder(f *os.File) int {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 32)) // from the start, each time
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
