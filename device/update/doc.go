// Package update is how termd replaces itself with a signed release
// (package release) without ever leaving a device that does not start.
//
// # Processes
//
// termd --supervise runs as two processes. The one started (by systemd,
// or by hand) is the supervisor (Supervise): it is small, runs no link and
// no display, and starts the worker — the same command line, with the
// environment naming a pipe back to it (EnvFD), the installed binary
// (EnvExe) and the state dir (EnvState). The worker is termd proper. It
// finds its supervisor with FromEnv and tells it two things over the
// pipe: "healthy" once its first session has completed its first
// heartbeat (Worker.Healthy), and "update" once a release is staged
// (Apply). A binary that exits at start never runs its own code, so the
// judge of a new binary is always the supervisor, which is the binary
// that was installed before it.
//
// # One update
//
//  1. The worker's Apply checks the manifest before downloading: the
//     platform (release.CurrentPlatform), the signature against the
//     pinned key, and the version (newer than the running one unless
//     AllowDowngrade; see CompareVersions). It downloads the binary from
//     the server to EXE.new-SHA.part beside the installed binary (same
//     file system), resuming a partial file with a Range request, never
//     reading more than the manifest's size, and checks its size and
//     SHA-256. Only then is it made executable (0755), fsynced and
//     renamed to EXE.new beside its manifest EXE.new.release.json, the
//     server's id of the attempt is kept (RequestFile: the next start's
//     report names it), and, once the person at the device is not using
//     it (Options.WaitIdle, issue 42: no run in progress, no question
//     open, no key a moment ago), the supervisor is told "update": termd
//     never restarts in the middle of a conversation.
//  2. The supervisor re-checks the staged binary against its manifest,
//     records the trial in the state file (StateFile: pending version,
//     deadline, attempts), stops the worker (SIGTERM, then SIGKILL after
//     StopTimeout) and starts EXE.new as the new worker. The installed
//     binary is not touched yet.
//  3. Health gate: when the new worker says "healthy" within Gate, the
//     supervisor installs it (Install: the installed binary is kept as
//     EXE.prev, EXE.new is renamed over EXE with rename(2), the directory
//     fsynced) and records the success. When it exits first, or Gate
//     passes (then it is stopped: SIGTERM, SIGKILL after StopTimeout),
//     the supervisor deletes EXE.new and starts EXE again — the binary
//     that ran before — recording the failure (Status.LastFailure).
//
// So EXE only ever holds a binary that has passed the gate (or the one
// installed by hand): a kill -9 or a power cut at any moment leaves
// either the old binary or the new one there, both whole. A supervisor
// killed during a trial is restarted (systemd Restart=always, or by hand)
// from EXE, the old binary, finds the pending trial in the state file and
// runs it again, at most MaxAttempts times in all, then gives it up as
// failed. A supervisor killed during Install finds EXE.new gone and EXE
// being the pending release, and records the success.
//
// The supervisor is the old binary's code until the service restarts
// (the worker runs the new one at once): its contract with the worker —
// the three variables, the two lines, the state file — is versioned
// (ProtocolVersion) and kept compatible.
//
// # Patches
//
// An update may carry a patch (issue 43, patch.go) made from the binary
// termd runs (connect's binary_sha256: BinarySHA256, hashed once and
// kept in the state dir). Its signed manifest is checked before
// anything is fetched, the patch is downloaded like a binary (at most
// its size, resumable) and applied (package release/delta) into the
// same EXE.new-<sha>.part a whole binary would be downloaded to, hashed
// as it is written; from there on nothing differs. Any failure falls
// back to downloading the whole binary, and Options.Note says so.
//
// # Under systemd
//
// termd.service runs termd --supervise with Restart=always and
// NotifyAccess=all (the worker, not the main process, sends READY and
// WATCHDOG; the supervisor removes WATCHDOG_PID from its environment).
// When the worker exits by itself (not for an update) the supervisor
// exits with its status and systemd restarts both; without systemd the
// supervisor's exit status is the worker's, as plain termd's was. The
// binary must live in a directory the service may write
// (ReadWritePaths=), not under ProtectSystem's read-only /usr.
package update
