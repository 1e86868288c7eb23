package procs

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"termlink/server/fdbudget"
)

// MarkerEnv is the variable every agent process carries; its value names
// the workspace of the server that started it (Registry.Marker).
const MarkerEnv = "TERMLINK_AGENT_OWNER"

// FileName is the registry file, relative to the workspace.
const FileName = "run/agents.pids"

// Registry records the process groups of running agents in the
// workspace, for the sentinel that kills them when the server dies and
// for the reaping a successor does after a crash. A nil *Registry is
// valid: processes still get the parent death signal, but nothing is
// recorded, no marker is set and no sentinel watches them.
type Registry struct {
	path   string
	marker string // MarkerEnv's value
	log    *slog.Logger
	fds    *fdbudget.Pool // descriptors of agent processes; nil: not counted

	mu     sync.Mutex
	groups map[int]uint64 // pgid -> start time of its leader (clock ticks since boot)
	file   *os.File       // the registry file, open for rewriting; nil until the first write
	size   int            // its length
	buf    []byte

	smu      sync.Mutex
	sentinel *sentinel // started with the first agent; replaced if it died
	closed   bool
}

// Open returns the registry of workspace (an absolute path), creating
// its run directory. It does not reap; call Reap before starting agents.
func Open(workspace string, log *slog.Logger) (*Registry, error) {
	if log == nil {
		log = slog.Default()
	}
	path := filepath.Join(workspace, FileName)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating the agent registry directory: %w", err)
	}
	sum := sha256.Sum256([]byte(filepath.Clean(workspace)))
	return &Registry{
		path:   path,
		marker: hex.EncodeToString(sum[:12]),
		log:    log,
		groups: map[int]uint64{},
	}, nil
}

// SetFDs makes every agent started from now on take
// fdbudget.PerAgent descriptors of fds, given back by Done; an agent
// the budget has no room for is not started (StartWith says why). Call
// it before the first Start.
func (r *Registry) SetFDs(fds *fdbudget.Pool) {
	if r != nil {
		r.fds = fds
	}
}

// Marker is the value of MarkerEnv in this registry's agents.
func (r *Registry) Marker() string {
	if r == nil {
		return ""
	}
	return r.marker
}

// Env returns env with the marker variable set (replacing an inherited
// one); a nil registry returns env unchanged.
func (r *Registry) Env(env []string) []string {
	if r == nil {
		return env
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, MarkerEnv+"=") {
			out = append(out, kv)
		}
	}
	return append(out, MarkerEnv+"="+r.marker)
}

// Start starts cmd as the leader of a new process group, with the
// parent death signal and the marker, and records its group. Release
// the record with Done once the process has been waited for.
func (r *Registry) Start(cmd *exec.Cmd) error {
	return r.StartWith(cmd, cmd.Start)
}

// StartWith is Start where start (which must call cmd.Start, e.g.
// pty.StartWithSize) does the starting. A start that makes the process a
// session leader (Setsid) leaves Setpgid off: a session leader already
// leads its group.
func (r *Registry) StartWith(cmd *exec.Cmd, start func() error) error {
	return r.startWith(cmd, start, nil)
}

// Ticket holds the descriptors of one agent process from before it
// starts (Reserve), so that the pipes made for it before Start are
// counted too.
type Ticket struct {
	fds  *fdbudget.Pool
	held bool // the descriptors are the ticket's (not yet a started process's)
}

// Reserve waits until the descriptor budget (SetFDs) has room for one
// more agent process, fdbudget.PerAgent descriptors, or ctx ends. Make
// the process's pipes after it, start the process with StartReserved,
// and Release the ticket when done with it: a started process has taken
// its descriptors over (Done gives them back).
func (r *Registry) Reserve(ctx context.Context) (*Ticket, error) {
	if r == nil || r.fds == nil {
		return &Ticket{}, nil
	}
	if err := r.fds.Acquire(ctx, fdbudget.PerAgent); err != nil {
		return nil, fmt.Errorf("agent not started: %w", err)
	}
	return &Ticket{fds: r.fds, held: true}, nil
}

// Release gives the ticket's descriptors back unless a process started
// with them. It may be called more than once.
func (t *Ticket) Release() {
	if t != nil && t.held {
		t.held = false
		t.fds.Release(fdbudget.PerAgent)
	}
}

// StartReserved is Start with the descriptors of t (from Reserve).
func (r *Registry) StartReserved(t *Ticket, cmd *exec.Cmd) error {
	return r.startWith(cmd, cmd.Start, t)
}

func (r *Registry) startWith(cmd *exec.Cmd, start func() error, t *Ticket) error {
	if r != nil {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = r.Env(cmd.Env)
		if err := r.watch(); err != nil {
			return err
		}
	}
	resolve(cmd)
	prepare(cmd)
	var fds *fdbudget.Pool
	if r != nil {
		fds = r.fds
	}
	reserved := t != nil && t.held && t.fds == fds
	if !reserved && !fds.TryAcquire(fdbudget.PerAgent) {
		return fmt.Errorf("agent not started: the server has no file descriptors left for it (%s); try again later", fds.Budget())
	}
	if err := spawn(start); err != nil {
		if !reserved {
			fds.Release(fdbudget.PerAgent)
		}
		return err
	}
	if reserved {
		t.held = false // the process's now, until Done
	}
	r.add(cmd.Process.Pid)
	return nil
}

// watch makes sure the sentinel runs before an agent starts.
func (r *Registry) watch() error {
	r.smu.Lock()
	defer r.smu.Unlock()
	if r.closed {
		return errors.New("the agent registry is closed")
	}
	if r.sentinel != nil && r.sentinel.alive() {
		return nil
	}
	if r.sentinel != nil {
		r.log.Warn("the agent sentinel ended; starting another")
	}
	s, err := startSentinel(r.path)
	if err != nil {
		return err
	}
	r.sentinel = s
	return nil
}

// Close stops the sentinel, which first kills every group still
// recorded; call it once the agents have been stopped. Start fails
// afterwards.
func (r *Registry) Close() {
	if r == nil {
		return
	}
	r.smu.Lock()
	defer r.smu.Unlock()
	r.closed = true
	if r.sentinel != nil {
		r.sentinel.close()
		r.sentinel = nil
	}
}

// Done forgets the group led by pid (its leader has been waited for and
// its group killed).
func (r *Registry) Done(pid int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.groups[pid]; ok {
		delete(r.groups, pid)
		r.writeLocked()
		r.fds.Release(fdbudget.PerAgent)
	}
}

func (r *Registry) add(pid int) {
	if r == nil {
		return
	}
	st, _ := startTime(pid)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups[pid] = st
	r.writeLocked()
}

// writeLocked rewrites the registry file: "pgid starttime" per line. It
// is small (one line per running agent) and needs no fsync: it only has
// to survive the server process, not the machine (a reboot ends the
// agents anyway). It is rewritten in place, with one write (or, when no
// agent runs, one truncate): a process dies between system calls, so a
// successor reads the old or the new list, never a mix. A shorter list
// is padded with newlines to the length of the last, which the reader
// skips. That keeps two system calls per agent run (one at its start,
// one at its end) instead of a new file and a rename each time.
func (r *Registry) writeLocked() {
	if err := r.writeFileLocked(); err != nil {
		r.log.Warn("cannot update the agent registry; agents left by a crash may not be reaped", "file", r.path, "err", err)
		if r.file != nil {
			r.file.Close()
			r.file = nil // reopened on the next update
		}
	}
}

func (r *Registry) writeFileLocked() error {
	if r.file == nil {
		f, err := os.OpenFile(r.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		r.file, r.size = f, 0
	}
	r.buf = r.buf[:0]
	pids := make([]int, 0, len(r.groups))
	for pid := range r.groups {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		r.buf = strconv.AppendInt(r.buf, int64(pid), 10)
		r.buf = append(r.buf, ' ')
		r.buf = strconv.AppendUint(r.buf, r.groups[pid], 10)
		r.buf = append(r.buf, '\n')
	}
	if len(r.buf) == 0 {
		r.size = 0
		return r.file.Truncate(0)
	}
	n := len(r.buf)
	for len(r.buf) < r.size {
		r.buf = append(r.buf, '\n')
	}
	if _, err := r.file.WriteAt(r.buf, 0); err != nil {
		return err
	}
	r.size = max(r.size, n)
	return nil
}

// Reap kills what a crashed predecessor in the same workspace left: each
// recorded group whose leader still has the recorded start time, and
// every process that carries this workspace's marker. It returns how
// many processes or groups it killed. Call it before starting agents:
// it would kill this server's own too.
func (r *Registry) Reap() (int, error) {
	if r == nil {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	recorded, err := readRegistry(r.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("cannot read the agent registry", "file", r.path, "err", err)
	}
	for pgid, st := range recorded {
		if cur, ok := startTime(pgid); ok && cur == st && st != 0 {
			if KillGroup(pgid) == nil {
				r.log.Warn("killed an agent process group left by a crashed server", "pgid", pgid)
				n++
			}
		}
	}
	for _, pid := range markedProcesses(r.marker) {
		if killPid(pid) == nil {
			r.log.Warn("killed an agent process left by a crashed server", "pid", pid)
			n++
		}
	}
	r.groups = map[int]uint64{}
	r.writeLocked()
	return n, nil
}

// readRegistry parses a registry file; bad lines are skipped.
func readRegistry(path string) (map[int]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	groups := map[int]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pidText, stText, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		pid, err1 := strconv.Atoi(pidText)
		st, err2 := strconv.ParseUint(stText, 10, 64)
		if err1 == nil && err2 == nil && pid > 1 {
			groups[pid] = st
		}
	}
	return groups, sc.Err()
}
