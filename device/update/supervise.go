package update

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"termlink/release"
)

// Supervisor defaults.
const (
	DefaultGate        = 2 * time.Minute
	DefaultStopTimeout = 15 * time.Second
	MaxAttempts        = 3
)

// Config is what Supervise runs with.
type Config struct {
	// Exe is the installed binary (default os.Executable()).
	Exe string
	// Args are the worker's arguments (termd's own, without --supervise).
	Args []string
	// StateDir holds StateFile.
	StateDir string
	// Gate is the health gate: how long a new binary has to say healthy
	// (default DefaultGate; Apply's Options.Gate wins).
	Gate time.Duration
	// StopTimeout is how long a worker has to exit after SIGTERM before
	// SIGKILL (default DefaultStopTimeout).
	StopTimeout time.Duration
	// Command makes the worker's command (default exec.Command; tests
	// run ARM binaries under an emulator).
	Command func(name string, args ...string) *exec.Cmd
	Logger  *slog.Logger
	Now     func() time.Time
}

// ExitError is Supervise's error when the worker exited by itself (not
// for an update) with a failure: the supervisor exits with Code.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("the worker exited with status %d", e.Code) }

type supervisor struct {
	Config
	log    *slog.Logger
	st     *Status
	staged string
}

// Supervise starts the worker and keeps it running through updates until
// ctx ends (it stops the worker then and returns nil) or the worker exits
// by itself (nil for status 0, else an *ExitError). See the package doc.
func Supervise(ctx context.Context, c Config) error {
	if c.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("supervisor: finding its own binary: %w", err)
		}
		c.Exe = exe
	}
	if c.Gate <= 0 {
		c.Gate = DefaultGate
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.Command == nil {
		c.Command = exec.Command
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	s := &supervisor{Config: c, log: c.Logger, staged: c.Exe + StagedSuffix}
	if s.log == nil {
		s.log = slog.Default()
	}
	st, err := ReadStatus(c.StateDir)
	if err != nil {
		// A state file that cannot be read must not stop the device.
		bad := filepath.Join(c.StateDir, StateFile+".bad")
		s.log.Error("update state unreadable; set aside, any staged release dropped", "err", err, "moved_to", bad)
		os.Rename(filepath.Join(c.StateDir, StateFile), bad)
		s.removeStaged()
		st = &Status{}
	}
	s.st = st
	s.resume()
	for {
		if err := ctx.Err(); err != nil {
			return nil
		}
		var trial *Pending
		if p := s.st.Pending; p != nil {
			if p.Attempts >= MaxAttempts {
				s.fail(fmt.Sprintf("the trial was interrupted %d times (the supervisor was killed or the device lost power)", p.Attempts))
				continue
			}
			p.Attempts++
			p.Deadline = c.Now().Add(time.Duration(p.GateSeconds) * time.Second).UTC().Round(time.Second)
			if err := writeStatus(c.StateDir, s.st); err != nil {
				s.fail("recording the trial: " + err.Error()) // a trial not recorded does not start
				continue
			}
			trial = p
		}
		again, err := s.runWorker(ctx, trial)
		if !again {
			return err
		}
	}
}

// resume finishes what a killed supervisor left: a pending release with
// nothing staged was installed (or lost).
func (s *supervisor) resume() {
	p := s.st.Pending
	if p == nil {
		return
	}
	if _, err := os.Stat(s.staged); err == nil {
		return // the trial runs again
	}
	f, err := os.Open(s.Exe)
	if err == nil {
		_, sum, derr := release.Digest(f)
		f.Close()
		if derr == nil && sum == p.SHA256 {
			s.log.Info("update: the release was installed before the supervisor stopped", "version", p.Version)
			s.installed(p.Version)
			return
		}
	}
	s.fail("the staged binary is gone")
}

// installed records p's success.
func (s *supervisor) installed(version string) {
	s.st.Pending = nil
	s.st.Installed, s.st.InstalledAt = version, s.Now().UTC().Round(time.Millisecond)
	if err := writeStatus(s.StateDir, s.st); err != nil {
		s.log.Error("update: recording the installed release", "err", err)
	}
	os.Remove(s.staged + release.ManifestSuffix)
}

// fail gives the pending release up: deleted, the reason recorded.
func (s *supervisor) fail(reason string) {
	p := s.st.Pending
	s.removeStaged()
	if p == nil {
		return
	}
	s.log.Error("update failed; running the previous binary", "version", p.Version, "reason", reason)
	s.st.Pending = nil
	s.st.LastFailure = failure(p.Version, reason, s.Now())
	if err := writeStatus(s.StateDir, s.st); err != nil {
		s.log.Error("update: recording the failure", "err", err)
	}
}

func (s *supervisor) removeStaged() {
	os.Remove(s.staged)
	os.Remove(s.staged + release.ManifestSuffix)
}

// worker is a started worker.
type worker struct {
	cmd    *exec.Cmd
	msgs   chan string
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

func (s *supervisor) start(bin string) (*worker, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(os.Environ())+4)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "WATCHDOG_PID", EnvFD, EnvExe, EnvState, EnvProto: // WATCHDOG_PID names the supervisor
			continue
		}
		env = append(env, kv)
	}
	env = append(env, EnvFD+"=3", EnvExe+"="+s.Exe, EnvState+"="+s.StateDir, EnvProto+"="+strconv.Itoa(ProtocolVersion))
	var cmd *exec.Cmd
	err = startBusy(func() error {
		cmd = s.Command(bin, s.Args...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.ExtraFiles = []*os.File{pw} // fd 3
		cmd.Env = env
		return cmd.Start()
	}, time.Sleep)
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	w := &worker{cmd: cmd, msgs: make(chan string, 8), exited: make(chan struct{})}
	readDone := make(chan struct{})
	go func() { // owned by the worker: ends at EOF, when it exits
		defer close(readDone)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 256), 256)
		for sc.Scan() {
			select {
			case w.msgs <- sc.Text():
			default: // a worker saying too much is not heard
			}
		}
	}()
	go func() {
		w.err = cmd.Wait()
		<-readDone
		close(w.exited)
	}()
	return w, nil
}

// startBusy runs start again while it fails with ETXTBSY, up to 8 times
// over about 2.5 s. A binary this process has just written (an update
// installed) can still be open for writing in a child forked meanwhile
// that has not yet exec'd (the descriptor is close-on-exec, but held
// until then): exec of it then fails "text file busy" for that moment
// (go.dev/issue/22315; cmd/go retries its test binaries the same way).
func startBusy(start func() error, sleep func(time.Duration)) error {
	wait := 10 * time.Millisecond
	for i := 0; ; i++ {
		err := start()
		if !errors.Is(err, syscall.ETXTBSY) || i == 7 {
			return err
		}
		sleep(wait)
		wait *= 2
	}
}

// stop asks the worker to exit (SIGTERM), kills it after StopTimeout,
// and waits for it.
func (s *supervisor) stop(w *worker, sig os.Signal) {
	_ = w.cmd.Process.Signal(sig)
	t := time.NewTimer(s.StopTimeout)
	defer t.Stop()
	select {
	case <-w.exited:
	case <-t.C:
		s.log.Warn("update: the worker did not stop; killed", "pid", w.cmd.Process.Pid)
		_ = w.cmd.Process.Kill()
		<-w.exited
	}
}

// runWorker runs one worker (the staged release when trial is set) until
// it exits; again says whether to start the next.
func (s *supervisor) runWorker(ctx context.Context, trial *Pending) (again bool, err error) {
	bin := s.Exe
	var gate <-chan time.Time
	if trial != nil {
		bin = s.staged
		t := time.NewTimer(time.Duration(trial.GateSeconds) * time.Second)
		defer t.Stop()
		gate = t.C
		s.log.Info("update: starting the new release on trial", "version", trial.Version, "attempt", trial.Attempts, "gate", time.Duration(trial.GateSeconds)*time.Second)
	}
	w, err := s.start(bin)
	if err != nil {
		if trial != nil {
			s.fail(err.Error())
			return true, nil
		}
		return false, err
	}
	restart := false // the worker was stopped for an update
	for {
		select {
		case <-ctx.Done():
			s.stop(w, syscall.SIGTERM)
			return false, nil
		case line := <-w.msgs:
			cmd, arg, _ := strings.Cut(line, " ")
			switch {
			case cmd == msgHealthy && trial != nil:
				if err := Install(s.staged, s.Exe); err != nil {
					s.fail("installing: " + err.Error())
					s.stop(w, syscall.SIGTERM)
					return true, nil
				}
				s.log.Info("update: the new release passed the health gate and is installed", "version", trial.Version, "previous", s.Exe+PrevSuffix)
				s.installed(trial.Version)
				trial, gate = nil, nil
			case cmd == msgUpdate && trial == nil && !restart:
				if s.stage(arg) {
					restart = true
					s.stop(w, syscall.SIGTERM)
				}
			case cmd == msgUpdate:
				s.log.Warn("update: asked again while one is under way; ignored")
			}
		case <-gate:
			s.stop(w, syscall.SIGTERM)
			s.fail(fmt.Sprintf("no first heartbeat within %ds of its start", trial.GateSeconds))
			return true, nil
		case <-w.exited:
			if ctx.Err() != nil {
				return false, nil
			}
			if trial != nil {
				s.fail(fmt.Sprintf("it exited (%s) before its first heartbeat", exitText(w.err)))
				return true, nil
			}
			if restart {
				return true, nil
			}
			if w.err != nil && s.crashLoop(exitText(w.err)) { // crashloop.go
				return true, nil
			}
			var ee *exec.ExitError
			if errors.As(w.err, &ee) {
				code := ee.ExitCode()
				if code < 0 { // a signal
					code = 1
				}
				return false, &ExitError{Code: code}
			}
			return false, w.err
		}
	}
}

// stage takes the release the worker staged: its manifest read, the
// binary checked against it, the trial recorded. false: refused (and
// recorded as a failure when there was a release to name).
func (s *supervisor) stage(gateArg string) bool {
	gate := s.Gate
	if gateArg != "" {
		n, err := strconv.Atoi(gateArg)
		if err != nil || n < 1 || n > 86400 {
			s.log.Warn("update: bad gate from the worker; the default used", "gate", gateArg)
		} else {
			gate = time.Duration(n) * time.Second
		}
	}
	b, err := os.ReadFile(s.staged + release.ManifestSuffix)
	if err != nil {
		s.log.Error("update: no staged manifest", "err", err)
		s.removeStaged()
		return false
	}
	m, err := release.ParseManifest(b)
	if err != nil {
		s.log.Error("update: staged manifest", "err", err)
		s.removeStaged()
		return false
	}
	s.st.Pending = &Pending{Version: m.Version, SHA256: m.SHA256, Size: m.Size,
		GateSeconds: int(max(gate/time.Second, 1)), Requested: s.Now().UTC().Round(time.Second)}
	f, err := os.Open(s.staged)
	if err == nil {
		err = m.CheckBinary(f)
		f.Close()
	}
	if err != nil {
		s.fail("the staged binary: " + err.Error())
		return false
	}
	if err := writeStatus(s.StateDir, s.st); err != nil {
		s.fail("recording the trial: " + err.Error())
		return false
	}
	s.log.Info("update: release staged; restarting into it", "version", m.Version)
	return true
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("status %d", ee.ExitCode())
	}
	return err.Error()
}
