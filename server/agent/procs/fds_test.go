package procs

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"termlink/server/fdbudget"

	"termlink/internal/testwait"
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

// TestReserveWaitsForDescriptors: Reserve waits for an agent's
// descriptors (pipes are made after it), StartReserved starts with them,
// and a ticket not used gives them back.
func TestReserveWaitsForDescriptors(t *testing.T) {
	b := fdbudget.New(fdbudget.MinLimit) // room for one agent beside full sockets
	sockets := b.Pool(fdbudget.Sockets)
	for sockets.TryAcquire(1) {
	}
	r := newRegistry(t)
	r.SetFDs(b.Pool(fdbudget.Agents))
	ctx := context.Background()

	first, err := r.Reserve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "cat >/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.StartReserved(first, cmd); err != nil {
		t.Fatal(err)
	}
	first.Release() // no-op: the process holds them
	if got := b.Stats().Used[fdbudget.Agents]; got != fdbudget.PerAgent {
		t.Fatalf("agents hold %d, want %d", got, fdbudget.PerAgent)
	}

	waited := make(chan *Ticket, 1)
	go func() {
		tk, err := r.Reserve(ctx)
		if err != nil {
			t.Error(err)
		}
		waited <- tk
	}()
	select {
	case <-waited:
		t.Fatal("a second reservation got descriptors the first agent holds")
	case <-time.After(50 * time.Millisecond):
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := r.Reserve(short); err == nil || !strings.Contains(err.Error(), "agent not started: waiting for 6 file descriptors") {
		t.Fatalf("a reservation past its deadline: %v", err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	r.Done(cmd.Process.Pid)
	var second *Ticket
	select {
	case second = <-waited:
	case <-time.After(testwait.Deadline):
		t.Fatal("the waiting reservation did not get the descriptors given back")
	}
	second.Release()
	second.Release()
	if got := b.Stats().Used[fdbudget.Agents]; got != 0 {
		t.Fatalf("agents hold %d after every ticket is released", got)
	}

	var nilReg *Registry // a nil registry counts nothing
	tk, err := nilReg.Reserve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tk.Release()
}
