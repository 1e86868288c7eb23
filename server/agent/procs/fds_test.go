package procs

import (
	"os/exec"
	"strings"
	"testing"

	"termlink/server/fdbudget"
)

// TestAgentsTakeTheirDescriptors: each agent takes fdbudget.PerAgent
// descriptors until Done; one the budget has no room for is not started,
// and says why.
func TestAgentsTakeTheirDescriptors(t *testing.T) {
	b := fdbudget.New(fdbudget.MinLimit) // agents keep 6: one agent
	sockets := b.Pool(fdbudget.Sockets)
	for sockets.TryAcquire(1) { // sockets take the rest
	}
	r := newRegistry(t)
	r.SetFDs(b.Pool(fdbudget.Agents))

	first := exec.Command("/bin/sh", "-c", "cat >/dev/null")
	stdin, err := first.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(first); err != nil {
		t.Fatal(err)
	}
	if got := b.Stats().Used[fdbudget.Agents]; got != fdbudget.PerAgent {
		t.Fatalf("a running agent holds %d descriptors of the budget, want %d", got, fdbudget.PerAgent)
	}
	second := exec.Command("/bin/sh", "-c", "exit 0")
	err = r.Start(second)
	if err == nil {
		second.Wait()
		t.Fatal("a second agent started with no descriptors left for it")
	}
	if !strings.Contains(err.Error(), "no file descriptors left") || second.Process != nil {
		t.Fatalf("second start: %v (process %v)", err, second.Process)
	}
	stdin.Close()
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	r.Done(first.Process.Pid)
	if got := b.Stats().Used[fdbudget.Agents]; got != 0 {
		t.Fatalf("%d descriptors still held after Done", got)
	}
	third := exec.Command("/bin/sh", "-c", "exit 0")
	if err := r.Start(third); err != nil {
		t.Fatalf("an agent after the first ended: %v", err)
	}
	third.Wait()
	r.Done(third.Process.Pid)
}
