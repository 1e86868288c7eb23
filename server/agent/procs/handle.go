package procs

import (
	"sync"
	"time"
)

// Handle controls a long-lived agent process that leads its own group
// (Start): the first reason it was stopped for, killing the group, and the
// graceful stop sequence. The zero value has no process yet; SetPid gives
// it one. It is safe for concurrent use.
type Handle struct {
	exited <-chan struct{} // closed by the owner once the process is reaped

	mu     sync.Mutex
	pid    int
	reason string
}

// NewHandle returns the handle of a process whose owner closes exited
// once it has reaped it.
func NewHandle(exited <-chan struct{}) *Handle { return &Handle{exited: exited} }

// SetPid records the started process (the group leader).
func (h *Handle) SetPid(pid int) {
	h.mu.Lock()
	h.pid = pid
	h.mu.Unlock()
}

// SetReason records why the process is being stopped; the first reason
// wins.
func (h *Handle) SetReason(reason string) {
	h.mu.Lock()
	if h.reason == "" {
		h.reason = reason
	}
	h.mu.Unlock()
}

// Reason is why the process was stopped or killed, "" if it was not.
func (h *Handle) Reason() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reason
}

// Kill kills the process group at once, recording why.
func (h *Handle) Kill(reason string) {
	h.SetReason(reason)
	h.signal(true)
}

// signal sends SIGKILL (or SIGTERM) to the group, unless the process has
// been reaped: its id may then belong to someone else.
func (h *Handle) signal(kill bool) {
	select {
	case <-h.exited:
		return
	default:
	}
	h.mu.Lock()
	pid := h.pid
	h.mu.Unlock()
	if pid == 0 {
		return
	}
	if kill {
		_ = KillGroup(pid)
	} else {
		_ = TerminateGroup(pid)
	}
}

// StopGracefully waits grace for the process to exit (its stdin closed by
// the caller), then SIGTERMs its group, waits grace again, SIGKILLs it,
// and returns once it has exited.
func (h *Handle) StopGracefully(grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-h.exited:
		return
	case <-t.C:
	}
	h.signal(false)
	t.Reset(grace)
	select {
	case <-h.exited:
		return
	case <-t.C:
	}
	h.Kill("agent did not exit when stopped")
	<-h.exited
}

// AwaitExit waits for the process to exit, killing its group (for reason)
// if it still runs after d.
func (h *Handle) AwaitExit(d time.Duration, reason string) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.exited:
	case <-t.C:
		h.Kill(reason)
		<-h.exited
	}
}
