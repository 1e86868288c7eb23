//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/agent/procs"
)

// kill -9 of termserver during a run leaves no agent process behind: the
// agent and the grandchild it started die with the server, and one that
// left the agent's process group (setsid, as a daemon does) is killed by
// the restarted server. The restarted server runs the interrupted message
// again: at most twice in all. Issue 10, finding 6.
func TestKill9LeavesNoAgent(t *testing.T) {
	t.Parallel()
	workspace := t.TempDir()
	// Each run appends to runs.log, starts a grandchild that sleeps and
	// one that leaves the group, notes the pids, and answers after 2 s.
	// agent.pid is written last, once the escaped one has left the group
	// (it writes its own pid after setsid), so a kill that follows cannot
	// catch it still in the group on a busy machine.
	agent := `echo run >> runs.log; sleep 300 & echo $! > grandchild.pid; ` +
		`rm -f escaped.pid; setsid sh -c 'echo $$ > escaped.tmp; mv escaped.tmp escaped.pid; exec sleep 301' </dev/null >/dev/null 2>&1 & ` +
		`while [ ! -s escaped.pid ]; do sleep 0.01; done; echo $$ > agent.pid; sleep 2; echo done`
	cfgPath := filepath.Join(t.TempDir(), "termserver.json")
	cfg := fmt.Sprintf(`{"workspace": %q,
	  "channels": {"terminal-dev": {"kind": "terminal", "mode": "websocket", "accountId": "local", "agent": "slow"}},
	  "agents": {"slow": {"terminal": {"enabled": true, "command": %q, "timeout": 60}}}}`, workspace, agent)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := procs.Open(workspace, nil)
	if err != nil {
		t.Fatal(err)
	}
	marker := reg.Marker()
	// Runs last: what the re-run left outside its group after the servers
	// were killed.
	t.Cleanup(func() {
		for _, pid := range procs.MarkedProcesses(marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	p := start(t, cfgPath)
	d := connect(t, p, "device-001")
	d.send(&link.Message{MessageID: "m-1", Text: "work"})
	if ack, ok := d.read().(*link.Ack); !ok || !ack.Accepted {
		t.Fatalf("ack %+v", ack)
	}
	grandchild := readPidFile(t, filepath.Join(workspace, "grandchild.pid"))
	agentPid := readPidFile(t, filepath.Join(workspace, "agent.pid"))
	escaped := readPidFile(t, filepath.Join(workspace, "escaped.pid"))
	if len(procs.MarkedProcesses(marker)) == 0 {
		t.Fatal("the running agent carries no marker")
	}
	p.kill(t)

	testwait.UntilOK(t, "the agent processes gone with the server (kill -9)", func() error {
		left := procs.MarkedProcesses(marker)
		if slices.Equal(left, []int{escaped}) && processGone(agentPid) && processGone(grandchild) {
			return nil
		}
		return fmt.Errorf("marked %v, agent %d gone %v, grandchild %d gone %v",
			left, agentPid, processGone(agentPid), grandchild, processGone(grandchild))
	})

	p2 := start(t, cfgPath)
	waitGoneWithin(t, escaped, "the process that left the agent's group, after the restart")
	d2 := connect(t, p2, "device-001")
	d2.send(&link.Message{MessageID: "m-1", Text: "work"})
	ack, ok := d2.read().(*link.Ack)
	if !ok || !ack.Duplicate {
		t.Fatalf("resent m-1: %+v", ack)
	}
	if ack.Pending {
		if r, ok := d2.read().(*link.Message); !ok || r.MessageID != "m-1" || r.Text != "done" {
			t.Fatalf("m-1 reply %+v", r)
		}
	} else if ack.Reply == nil || ack.Reply.Text != "done" {
		t.Fatalf("m-1 duplicate without reply %+v", ack)
	}
	runs, _ := os.ReadFile(filepath.Join(workspace, "runs.log"))
	if n := strings.Count(string(runs), "run\n"); n < 1 || n > 2 {
		t.Errorf("m-1 ran %d times, want one interrupted run and at most one re-run", n)
	}
}

// waitGoneWithin waits for pid to end.
func waitGoneWithin(t *testing.T, pid int, what string) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("%s (pid %d) to end", what, pid), func() bool { return processGone(pid) })
}

// readPidFile waits for a file holding a pid and a newline.
func readPidFile(t *testing.T, path string) int {
	t.Helper()
	var b []byte
	testwait.Until(t, path+" written", func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// processGone tells whether pid no longer runs; a zombie (not yet reaped
// by whoever inherited it) counts as gone.
func processGone(pid int) bool { return !procs.Running(pid) }
