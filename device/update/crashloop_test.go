package update

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 43: a release that passed its gate (installed) and then crashes
// CrashLoopCrashes times within the gate of its install is rolled back:
// the previous binary is put back and runs, and the failure is recorded
// for the worker to report (rolled_back, "crash loop: ..."). Each crash
// is a supervisor run of its own, as under systemd (the supervisor exits
// with the worker's status and is restarted). Crashes past the gate are
// the release's own business: no rollback.
func TestCrashLoopAfterInstallRollsBack(t *testing.T) {
	nativeExec(t)
	for _, c := range []struct {
		name        string
		installedAt time.Duration // before now
		rollback    bool
	}{
		{"within the gate", 10 * time.Second, true},
		{"past the gate", 10 * time.Minute, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			exe, state := filepath.Join(dir, "termd"), filepath.Join(dir, "state")
			mark := filepath.Join(dir, "old-ran")
			if err := os.WriteFile(exe, []byte("#!/bin/sh\necho 'panic: boom' >&2\nexit 2\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(exe+PrevSuffix, []byte("#!/bin/sh\ntouch "+mark+"\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			installedAt := time.Now().Add(-c.installedAt).UTC().Round(time.Millisecond)
			if err := writeStatus(state, &Status{Installed: "1.1.0", InstalledAt: installedAt}); err != nil {
				t.Fatal(err)
			}
			cfg := Config{Exe: exe, StateDir: state, Gate: 2 * time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			for i := 1; i < CrashLoopCrashes; i++ {
				var ee *ExitError
				if err := Supervise(context.Background(), cfg); !errors.As(err, &ee) || ee.Code != 2 {
					t.Fatalf("crash %d: Supervise = %v, want the worker's status 2", i, err)
				}
			}
			err := Supervise(context.Background(), cfg)
			st, rerr := ReadStatus(state)
			if rerr != nil {
				t.Fatal(rerr)
			}
			_, ranOld := os.Stat(mark)
			if !c.rollback {
				var ee *ExitError
				if !errors.As(err, &ee) || ranOld == nil || st.LastFailure != nil {
					t.Fatalf("past the gate: Supervise = %v, the previous binary ran: %v, failure %+v; want no rollback", err, ranOld == nil, st.LastFailure)
				}
				return
			}
			if err != nil || ranOld != nil {
				t.Fatalf("crash %d: Supervise = %v, the previous binary ran: %v; want it rolled back and run", CrashLoopCrashes, err, ranOld == nil)
			}
			if b, _ := os.ReadFile(exe); !strings.Contains(string(b), "touch") {
				t.Fatalf("EXE is not the previous binary: %s", b)
			}
			f := st.LastFailure
			if f == nil || f.Version != "1.1.0" || !f.At.After(st.InstalledAt) ||
				!strings.Contains(f.Reason, "crash loop: it exited 3 times within 2m0s of its install (the last: status 2)") {
				t.Fatalf("recorded failure %+v", f)
			}
			if _, err := os.Stat(filepath.Join(state, CrashesFile)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the crash count is left: %v", err)
			}
		})
	}
}
