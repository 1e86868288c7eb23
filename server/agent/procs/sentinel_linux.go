package procs

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// sentinelScript is the one watcher process a registry keeps: it blocks
// reading its stdin, a pipe whose only writer is the server. The kernel
// closes that pipe when the server ends, however it ends (SIGKILL
// included), and then the sentinel kills every process group the
// registry file ($1) still lists — the agents and everything they
// started in their groups — and exits. The server never writes to the
// pipe; a clean shutdown closes it after stopping the agents, when the
// file lists none.
//
// What it does not cover, and who does: a process that left its agent's
// group (setsid, a daemon) is killed by the next server's Reap through
// the marker; an agent started in the instant before its group was
// recorded dies by its own parent death signal. A pid is reused only
// after its process and its group are gone; the sentinel acts at once
// when the server dies, so a recorded group whose members all ended is
// not reused in that instant (Reap, which runs later, compares start
// times instead).
const sentinelScript = `while read -r _; do :; done
while read -r g _; do
	case $g in
	'' | *[!0-9]*) ;;
	*) [ "$g" -gt 1 ] && kill -KILL -"$g" 2>/dev/null ;;
	esac
done <"$1"
exit 0`

// sentinelName is the sentinel's $0, what ps shows for it.
const sentinelName = "termlink-agent-sentinel"

// sentinel is a running sentinel process and the write end of its pipe.
type sentinel struct {
	cmd  *exec.Cmd
	w    *os.File
	done chan struct{} // closed when the process has ended
}

// startSentinel starts the sentinel for the registry file at path, in a
// process group of its own (a kill of an agent group never reaches it)
// and with no parent death signal: it must outlive the server.
func startSentinel(path string) (*sentinel, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting the agent sentinel: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", sentinelScript, sentinelName, path)
	cmd.Stdin = pr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = spawn(cmd.Start)
	pr.Close() // the sentinel holds it now
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("starting the agent sentinel: %w", err)
	}
	s := &sentinel{cmd: cmd, w: pw, done: make(chan struct{})}
	go func() { // owned by s: ends when the process does (after close)
		_ = cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// alive tells whether the sentinel still runs.
func (s *sentinel) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// close ends the sentinel as the server's death would: it kills the
// groups still recorded, then exits; close waits for that.
func (s *sentinel) close() {
	s.w.Close()
	<-s.done
}
