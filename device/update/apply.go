package update

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"termlink/internal/durable"
	"termlink/release"
)

// The environment the supervisor gives its worker.
const (
	EnvFD    = "TERMD_UPDATE_FD"    // the pipe to the supervisor (a file descriptor number)
	EnvExe   = "TERMD_UPDATE_EXE"   // the installed binary's path
	EnvState = "TERMD_UPDATE_STATE" // the state dir
	EnvProto = "TERMD_UPDATE_PROTO" // ProtocolVersion of the supervisor
)

// ProtocolVersion is the version of the supervisor's contract with its
// worker (the variables above, the lines msgHealthy and msgUpdate, the
// state file).
const ProtocolVersion = 1

// The lines a worker writes to its supervisor.
const (
	msgHealthy = "healthy"
	msgUpdate  = "update"
)

// Suffixes beside the installed binary EXE.
const (
	StagedSuffix = ".new"  // the release on trial
	PrevSuffix   = ".prev" // the binary the last update replaced
)

// Errors of Apply; each leaves the running and installed binaries as
// they are. They are wrapped with the details: use errors.Is.
var (
	ErrNoSupervisor  = errors.New("termd does not run under its supervisor (termd --supervise): it cannot update itself")
	ErrNoKey         = errors.New("no release key pinned (--release-key, or release.pub in the state dir)")
	ErrWrongPlatform = errors.New("the release is for another platform")
	ErrBadSignature  = release.ErrBadSignature
	ErrDowngrade     = errors.New("the release is not newer than the running version")
	ErrTruncated     = errors.New("the download stopped early")
	ErrTooLarge      = errors.New("the server sends more than the manifest's size")
	ErrChecksum      = errors.New("the downloaded binary is not the one the manifest describes")
	ErrDiskFull      = errors.New("no space left for the release")
	ErrBusy          = errors.New("an update is under way already")
)

// Worker is the worker's end of the pipe to its supervisor.
type Worker struct {
	Exe, StateDir string

	mu       sync.Mutex
	pipe     *os.File
	healthy  bool
	applying sync.Mutex // one Apply at a time
}

// FromEnv returns the supervisor's worker end from the environment and
// removes the variables (so a program termd starts does not see them);
// nil when termd does not run under a supervisor.
func FromEnv() *Worker {
	fdText, exe, dir := os.Getenv(EnvFD), os.Getenv(EnvExe), os.Getenv(EnvState)
	for _, k := range []string{EnvFD, EnvExe, EnvState, EnvProto} {
		os.Unsetenv(k)
	}
	fd, err := strconv.Atoi(fdText)
	if err != nil || fd < 3 || exe == "" || dir == "" {
		return nil
	}
	syscall.CloseOnExec(fd) // not for the programs termd starts
	return &Worker{Exe: exe, StateDir: dir, pipe: os.NewFile(uintptr(fd), "supervisor")}
}

// Healthy tells the supervisor that this binary came up, connected and
// completed its first heartbeat: the health gate of an update on trial.
// Only the first call writes; a nil Worker does nothing.
func (w *Worker) Healthy() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.healthy {
		return
	}
	w.healthy = true
	_ = w.send(msgHealthy)
}

// send writes one line to the supervisor (w.mu held). A pipe write of a
// few bytes does not block while the supervisor lives; a deadline keeps
// it bounded anyway.
func (w *Worker) send(line string) error {
	_ = w.pipe.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := w.pipe.WriteString(line + "\n"); err != nil {
		return fmt.Errorf("telling the supervisor %q: %w", line, err)
	}
	return nil
}

// Options is what Apply needs.
type Options struct {
	// URL is where the server serves the binary (http or https).
	URL string
	// Token is sent as Authorization: Bearer (the device's channel token).
	Token string
	// TLS is the server's TLS config (its CA, the client certificate):
	// the same as the link's. Client, when set, is used instead.
	TLS    *tls.Config
	Client *http.Client
	// Manifest is the release's manifest, as the server sent it.
	Manifest *release.Manifest
	// Key is the pinned release key.
	Key ed25519.PublicKey
	// Version is the running version.
	Version string
	// AllowDowngrade lets a release not newer than Version through (a
	// rollout that says so).
	AllowDowngrade bool
	// Gate is the health gate (0: the supervisor's).
	Gate time.Duration
	// UpdateID is the server's id of this attempt (its update frame's
	// update_id); kept in RequestFile for the next start's report.
	UpdateID string
	// Worker is the supervisor (FromEnv).
	Worker *Worker
	Logger *slog.Logger
	// WaitIdle, when set, returns once the person at the device is not
	// using it (issue 42: no run in progress, no question open, no key
	// pressed a moment ago), or ctx's error: the release is staged at
	// once and the supervisor told to restart into it only then.
	WaitIdle func(ctx context.Context) error

	// Patch and PatchURL (issue 43, patch.go): a patch of the running
	// binary into the release, tried before the whole binary at URL,
	// which is fetched when anything about the patch fails. PatchFrom
	// is the binary it applies to (default Worker.Exe). Note is told
	// how it went: "patched: ..." or "patch failed: ...; fetching the
	// full binary".
	Patch     *release.PatchManifest
	PatchURL  string
	PatchFrom string
	Note      func(string)
}

// Apply downloads the release, checks it and stages it beside the
// installed binary, then, once the device is idle (Options.WaitIdle),
// asks the supervisor to restart into it on trial (see the package doc).
// On success the supervisor stops this process shortly (SIGTERM). Every error leaves the running binary as it is; a
// truncated download is resumed by the next Apply of the same release.
func Apply(ctx context.Context, o Options) error {
	m := o.Manifest
	switch {
	case o.Worker == nil:
		return ErrNoSupervisor
	case len(o.Key) == 0:
		return ErrNoKey
	case m == nil:
		return errors.New("update: no manifest")
	}
	if !o.Worker.applying.TryLock() {
		return fmt.Errorf("%w: another download is under way", ErrBusy)
	}
	defer o.Worker.applying.Unlock()
	if p := release.CurrentPlatform(); m.Platform != p {
		return fmt.Errorf("%w: %s, this is %s", ErrWrongPlatform, m.Platform, p)
	}
	if err := m.Verify(o.Key); err != nil {
		return fmt.Errorf("release %s: %w", m.Version, err)
	}
	if !o.AllowDowngrade {
		c, err := CompareVersions(m.Version, o.Version)
		if err != nil {
			return fmt.Errorf("%w: %v (a rollout allowing downgrades installs it)", ErrDowngrade, err)
		}
		if c <= 0 {
			return fmt.Errorf("%w: %s, running %s", ErrDowngrade, m.Version, o.Version)
		}
	}
	st, err := ReadStatus(o.Worker.StateDir)
	if err == nil && st.Pending != nil {
		return fmt.Errorf("%w: %s is on trial", ErrBusy, st.Pending.Version)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	client := o.Client
	if client == nil {
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: o.TLS, Proxy: http.ProxyFromEnvironment}}
	}
	exe := o.Worker.Exe
	staged := exe + StagedSuffix
	part := staged + "-" + m.SHA256[:16] + ".part"
	removeOtherParts(staged, part)
	if !o.tryPatch(ctx, client, m, part, log) { // patch.go
		log.Info("downloading a release", "version", m.Version, "size", m.Size, "to", part)
		if err := download(ctx, client, o.URL, o.Token, part, m); err != nil {
			return err
		}
	}
	f, err := os.Open(part)
	if err != nil {
		return err
	}
	err = m.CheckBinary(f)
	f.Close()
	if err != nil {
		os.Remove(part) // complete and wrong: resuming it cannot help
		return fmt.Errorf("%w: %v", ErrChecksum, err)
	}
	// Verified: now it may become executable.
	if err := os.Chmod(part, 0o755); err != nil {
		return diskErr("chmod "+part, err)
	}
	if err := durable.WriteFile(staged+release.ManifestSuffix, func(w *bufio.Writer) error {
		_, err := w.Write(m.Marshal())
		return err
	}, false); err != nil {
		return diskErr("writing the manifest", err)
	}
	if err := os.Rename(part, staged); err != nil {
		return diskErr("staging the release", err)
	}
	if err := durable.SyncDir(filepath.Dir(exe)); err != nil {
		return diskErr("staging the release", err)
	}
	if err := writeRequest(o.Worker.StateDir, &Request{Version: m.Version, UpdateID: o.UpdateID}); err != nil {
		return diskErr("recording the update's id", err)
	}
	if o.WaitIdle != nil {
		if err := waitIdle(ctx, o.WaitIdle, log, m.Version); err != nil {
			return err
		}
	}
	msg := msgUpdate
	if o.Gate > 0 {
		msg += " " + strconv.Itoa(int(max(o.Gate/time.Second, 1)))
	}
	o.Worker.mu.Lock()
	defer o.Worker.mu.Unlock()
	if err := o.Worker.send(msg); err != nil {
		return err
	}
	log.Info("release staged; the supervisor restarts termd into it", "version", m.Version)
	return nil
}

// waitIdle waits for wait (the device idle), saying so when it is not
// at once.
func waitIdle(ctx context.Context, wait func(context.Context) error, log *slog.Logger, version string) error {
	quick, cancel := context.WithCancel(ctx)
	cancel() // a wait that returns at once on a cancelled ctx: idle now
	if err := wait(quick); err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	log.Info("release staged; restarting into it once the device is idle (a conversation is live)", "version", version)
	if err := wait(ctx); err != nil {
		return fmt.Errorf("the release is staged; termd stopped before the device was idle: %w", err)
	}
	return nil
}

// removeOtherParts deletes partial downloads of other releases.
func removeOtherParts(staged, keep string) {
	old, _ := filepath.Glob(staged + "-*.part")
	for _, p := range old {
		if p != keep && strings.HasSuffix(p, ".part") {
			os.Remove(p)
		}
	}
}
