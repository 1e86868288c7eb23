package termd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"termlink/device"
	"termlink/device/activity"
	"termlink/device/update"
	"termlink/internal/textcut"
	"termlink/link"
	"termlink/release"
)

// Updates over the session (issue 28): a termd that runs under its
// supervisor (--supervise) with a release key pinned lists "update" and
// its platform in connect. An update frame is checked, downloaded and
// staged by update.Apply; the supervisor then restarts into the release
// on trial. Every step and every refusal goes back to the server as an
// update_status, and a refusal is shown on the display too; the running
// binary stays as it was. On start termd reports where the last update
// left it (update.json): rolled back and why, on trial, or installed.

// updateHandler is the handler of update frames, or nil when this termd
// cannot update itself (no supervisor, no key). A nil client: only
// whether there is one (fleetCaps).
func (s *setup) updateHandler(client *link.Client, d *device.Daemon, wsURL, token string) func(context.Context, *link.Update) {
	cfg := s.cfg
	if cfg.Worker == nil || len(cfg.ReleaseKey) == 0 {
		return nil
	}
	if client == nil {
		return func(context.Context, *link.Update) {}
	}
	u := &updater{cfg: cfg, client: client, daemon: d, token: token, log: s.log, busy: s.busy}
	s.onTrial = u.reportStart()
	return u.handle
}

// updater applies update frames.
type updater struct {
	cfg    Config
	client *link.Client
	daemon *device.Daemon
	token  string
	log    *slog.Logger
	busy   *activity.Tracker // nil: restart at once (busy.go)
}

// report sends st (and logs it); a failure is also shown on the display.
func (u *updater) report(st *link.UpdateStatus) {
	st.Running = u.cfg.Version
	st.Reason = textcut.Cut(st.Reason, link.MaxUpdateReasonBytes)
	if err := u.client.Report(st); err != nil {
		u.log.Warn("update status not sent", "state", st.State, "err", err)
	}
	if link.IsUpdateFailure(st.State) {
		u.log.Error("update not installed", "version", st.Version, "state", st.State, "reason", st.Reason)
		if u.daemon != nil {
			u.daemon.Show(fmt.Sprintf("Update %s %s: %s", st.Version, stateWords(st.State), st.Reason), 30)
		}
	} else {
		u.log.Info("update", "version", st.Version, "state", st.State)
	}
}

func stateWords(state string) string {
	switch state {
	case link.UpdateRolledBack:
		return "rolled back"
	case link.UpdateRefused:
		return "refused"
	}
	return state
}

// reportStart reports where the last update left this device (see
// startStatus); true when this binary is a release on trial.
func (u *updater) reportStart() (onTrial bool) {
	st, err := update.ReadStatus(u.cfg.Worker.StateDir)
	if err != nil {
		u.log.Warn("update state not read", "err", err)
		return false
	}
	req, err := update.ReadRequest(u.cfg.Worker.StateDir)
	if err != nil {
		u.log.Warn("the last update's id not read; the start report names none", "err", err)
	}
	us, onTrial := startStatus(st, req, u.cfg.Version)
	if link.IsUpdateFailure(us.State) {
		u.report(us)
	} else {
		_ = u.client.Report(us)
	}
	return onTrial
}

// startStatus is what a binary of version running says on start, from
// the supervisor's state file: on trial (restarting: installed once its
// first heartbeat is answered, which afterHealthy reports); rolled back
// from the last release tried, with the supervisor's reason, when that
// failure came after the last install; else installed. The report names
// the update_id of the attempt it is about when the worker recorded one
// for that version (req, the last update it staged; nil: none).
func startStatus(st *update.Status, req *update.Request, running string) (us *link.UpdateStatus, onTrial bool) {
	us = &link.UpdateStatus{Version: running, Running: running, State: link.UpdateInstalled}
	switch f := st.LastFailure; {
	case st.Pending != nil && st.Pending.Version == running:
		us.State = link.UpdateRestarting
		onTrial = true
	case f != nil && f.Version != running && f.At.After(st.InstalledAt):
		us.Version, us.State, us.Reason = f.Version, link.UpdateRolledBack, f.Reason
	case st.Installed != running:
		return us, false // installed by hand: no update's
	}
	us.UpdateID = req.IDFor(us.Version)
	return us, onTrial
}

// afterHealthy reports "installed" once the supervisor has installed the
// release on trial (its state file says so), after the health gate
// passed; it waits at most a minute.
func afterHealthy(ctx context.Context, client *link.Client, stateDir, version string, log *slog.Logger) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st, err := update.ReadStatus(stateDir)
		if err == nil && st.Pending == nil && st.Installed == version {
			req, _ := update.ReadRequest(stateDir) // unread: a report without the id, as before
			_ = client.Report(&link.UpdateStatus{UpdateID: req.IDFor(version), Version: version, Running: version, State: link.UpdateInstalled})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	log.Warn("the supervisor has not recorded this release as installed a minute after its health gate", "version", version)
}

// handle applies one update frame.
func (u *updater) handle(ctx context.Context, f *link.Update) {
	st := &link.UpdateStatus{UpdateID: f.UpdateID, Version: f.Version}
	m, err := release.ParseManifest([]byte(f.Manifest))
	switch {
	case err != nil:
		st.State, st.Reason = link.UpdateRefused, err.Error()
	case m.Version != f.Version:
		st.State, st.Reason = link.UpdateRefused, fmt.Sprintf("the manifest is of version %s, the update frame says %s", m.Version, f.Version)
	case m.Version == u.cfg.Version:
		st.State = link.UpdateInstalled // running it already
	}
	if st.State != "" {
		u.report(st)
		return
	}
	src, err := u.client.ResolveURL(f.URL)
	if err != nil {
		st.State, st.Reason = link.UpdateRefused, err.Error()
		u.report(st)
		return
	}
	hc, err := u.client.HTTPClient()
	if err != nil {
		st.State, st.Reason = link.UpdateFailed, err.Error()
		u.report(st)
		return
	}
	st.State = link.UpdateDownloading
	u.report(st)
	opt := update.Options{URL: src, Token: u.token, Client: hc, Manifest: m, Key: u.cfg.ReleaseKey, UpdateID: f.UpdateID,
		Version: u.cfg.Version, AllowDowngrade: f.AllowDowngrade, Gate: time.Duration(f.GateSeconds) * time.Second,
		Worker: u.cfg.Worker, Logger: u.log, WaitIdle: u.waitIdle()}
	note := u.patchOptions(f, &opt) // patch.go
	err = update.Apply(ctx, opt)
	st = &link.UpdateStatus{UpdateID: f.UpdateID, Version: f.Version}
	switch {
	case err == nil:
		st.State, st.Reason = link.UpdateRestarting, note()
	case ctx.Err() != nil:
		return // termd is stopping: the next start reports where it is
	case isRefusal(err):
		st.State, st.Reason = link.UpdateRefused, err.Error()
	default:
		st.State, st.Reason = link.UpdateFailed, err.Error()
	}
	u.report(st)
}

// waitIdle is how Apply waits for the device to be idle before the
// restart (nil: it does not wait).
func (u *updater) waitIdle() func(context.Context) error {
	if u.busy == nil {
		return nil
	}
	return u.busy.WaitIdle
}

// isRefusal: Apply's errors that come before any download.
func isRefusal(err error) bool {
	for _, e := range []error{update.ErrNoSupervisor, update.ErrNoKey, update.ErrWrongPlatform, update.ErrBadSignature,
		update.ErrDowngrade, update.ErrBusy} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
