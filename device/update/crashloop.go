package update

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"termlink/internal/durable"
)

// A crash loop after an install fails the health gate too (issue 43): a
// release passes the gate at its first heartbeat, but one that then
// keeps crashing is no better. Each time the installed release's worker
// exits by itself with a failure (a panic, a fatal signal, a non-zero
// status) within the gate of its install, the supervisor counts it, in a
// file of its own (CrashesFile: "VERSION INSTALLED_AT_MS COUNT", so an older
// supervisor's strict reading of StateFile never meets a field it does
// not know); at CrashLoopCrashes it puts the previous binary back
// (EXE.prev over EXE), records the failure as a rollback
// (Status.LastFailure, which the worker reports at its next connect:
// rolled_back, "crash loop: ...") and starts it.
const (
	CrashesFile      = "update.crashes"
	CrashLoopCrashes = 3
)

// crashLoop counts a failed exit (why) of the installed release and
// reports whether it rolled the release back: start the worker again.
func (s *supervisor) crashLoop(why string) bool {
	st := s.st
	since := s.Now().Sub(st.InstalledAt)
	if st.Installed == "" || st.InstalledAt.IsZero() || since < 0 || since > s.Gate ||
		(st.LastFailure != nil && !st.LastFailure.At.Before(st.InstalledAt)) { // rolled back already
		return false
	}
	key := st.Installed + " " + strconv.FormatInt(st.InstalledAt.UnixMilli(), 10) // this install of it
	n := readCrashes(s.StateDir, key) + 1
	if n < CrashLoopCrashes {
		if err := writeStateFile(s.StateDir, CrashesFile, []byte(key+" "+strconv.Itoa(n)+"\n")); err != nil {
			s.log.Error("update: counting a crash of the new release", "err", err)
		}
		s.log.Warn("update: the new release crashed after its install", "version", st.Installed, "crashes", n, "rollback_at", CrashLoopCrashes)
		return false
	}
	prev := s.Exe + PrevSuffix
	if err := os.Rename(prev, s.Exe); err != nil {
		s.log.Error("update: the new release crash-loops but the previous binary cannot be put back", "version", st.Installed, "err", err)
		return false
	}
	if err := durable.SyncDir(filepath.Dir(s.Exe)); err != nil {
		s.log.Warn("update: syncing the rollback", "err", err)
	}
	os.Remove(filepath.Join(s.StateDir, CrashesFile))
	reason := fmt.Sprintf("crash loop: it exited %d times within %s of its install (the last: %s)", n, s.Gate, why)
	s.log.Error("update: the new release crash-loops; the previous binary runs again", "version", st.Installed, "reason", reason)
	st.LastFailure = failure(st.Installed, reason, s.Now())
	if err := writeStatus(s.StateDir, st); err != nil {
		s.log.Error("update: recording the rollback", "err", err)
	}
	return true
}

// readCrashes is the crashes counted of the install key names ("VERSION
// INSTALLED_AT_MS"; 0: none, of another install, or unreadable).
func readCrashes(stateDir, key string) int {
	b, err := os.ReadFile(filepath.Join(stateDir, CrashesFile))
	if err != nil || len(b) > 256 {
		return 0
	}
	line := strings.TrimSpace(string(b))
	i := strings.LastIndexByte(line, ' ')
	if i < 0 || line[:i] != key {
		return 0
	}
	n, err := strconv.Atoi(line[i+1:])
	if err != nil || n < 0 || n > 100 {
		return 0
	}
	return n
}
