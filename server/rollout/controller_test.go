package rollout_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"termlink/server/rollout"
	"termlink/server/rollout/rollouttest"
)

const lease = 3 * time.Second

// flaky is a node's handle whose lease writes fail while down is set
// (that node cannot reach the store).
type flaky struct {
	rollout.Storage
	down atomic.Bool
}

func (f *flaky) TakeLease(ctx context.Context, holder string, rev uint64) (uint64, error) {
	if f.down.Load() {
		return 0, errors.New("the store does not answer")
	}
	return f.Storage.TakeLease(ctx, holder, rev)
}

func openNode(t *testing.T, st rollout.Storage, f *rollouttest.Fleet, node string) *rollout.Manager {
	t.Helper()
	opt := f.Options(node)
	opt.Lease = lease
	m, err := rollout.New(context.Background(), st, opt)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// One controller at a time: the first node takes the lease and advances
// the rollouts; a rollout started through the other node is released by
// it, each device sent its frame by the node it is connected to. When
// the controller dies, nothing advances until its lease expires (a whole
// lease after the survivor last saw it renewed); then the survivor
// takes it and goes on from the stored state to the end.
func TestControllerTakesOverAfterTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, f := rollouttest.NewMem(), rollouttest.NewFleet()
		f.Connect("d1", "b", "v1")
		f.Connect("d2", "b", "v1")
		a := openNode(t, mem.Handle(), f, "a")
		defer a.Close()
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		b := openNode(t, mem.Handle(), f, "b")
		defer b.Close()
		time.Sleep(time.Second)
		synctest.Wait()
		if !a.Controlling() || b.Controlling() {
			t.Fatalf("controlling: a %v, b %v; want a alone", a.Controlling(), b.Controlling())
		}
		r, err := b.Create(rollouttest.Channel, rollout.Request{Version: "v2", Target: rollout.Target{All: true}, Canary: 1}, "otto")
		if err != nil {
			t.Fatal(err)
		}
		// a saw it and released the canary; b saw that and sent d1 its
		// frame; b answered then, as one server does.
		if r.Wave != 0 || r.Counts[rollout.Sent] != 1 {
			t.Fatalf("the answer through b: wave %d, %v; want the canary sent", r.Wave, r.Counts)
		}
		if s := f.Sent("b", "d1"); len(s) != 1 || s[0].UpdateID != r.ID+".1" {
			t.Fatalf("the canary d1 (on b) was sent %+v", s)
		}
		if err := a.Close(); err != nil { // its node dies
			t.Fatal(err)
		}
		died := time.Now()
		f.Connect("d1", "b", "v2")
		if _, err := b.Report(rollouttest.Channel, "d1", rollouttest.Installed("v2")); err != nil {
			t.Fatal(err)
		}
		for time.Since(died) < lease-time.Second {
			time.Sleep(time.Second)
			synctest.Wait()
			if b.Controlling() || len(f.Sent("b", "d2")) != 0 {
				t.Fatalf("%v after the controller died, within its lease: b controls %v, d2 sent %d frames", time.Since(died), b.Controlling(), len(f.Sent("b", "d2")))
			}
		}
		time.Sleep(3 * time.Second) // past the lease, and a tick more
		synctest.Wait()
		if !b.Controlling() || len(f.Sent("b", "d2")) != 1 {
			t.Fatalf("%v after the controller died: b controls %v, d2 sent %d frames", time.Since(died), b.Controlling(), len(f.Sent("b", "d2")))
		}
		f.Connect("d2", "b", "v2")
		if _, err := b.Report(rollouttest.Channel, "d2", rollouttest.Installed("v2")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got, _ := b.Get(rollouttest.Channel, r.ID); got.State != rollout.Done {
			t.Fatalf("after the last device: %s (%s)", got.State, got.Note)
		}
	})
}

// A controller that cannot renew its lease stops advancing the
// rollouts within 2/3 of a lease, before anyone else may take it (a
// whole lease): never two at once. Once the store answers again and
// the lease is another's, it stays off.
func TestControllerStopsBeforeItsLeaseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, f := rollouttest.NewMem(), rollouttest.NewFleet()
		sa := &flaky{Storage: mem.Handle()}
		a := openNode(t, sa, f, "a")
		defer a.Close()
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		b := openNode(t, mem.Handle(), f, "b")
		defer b.Close()
		time.Sleep(time.Second)
		synctest.Wait()
		if !a.Controlling() {
			t.Fatal("a does not control")
		}
		sa.down.Store(true)
		both := false
		for range 8 {
			time.Sleep(500 * time.Millisecond)
			synctest.Wait()
			both = both || (a.Controlling() && b.Controlling())
		}
		if both || a.Controlling() || !b.Controlling() {
			t.Fatalf("after a lost the store: both at once %v; a %v, b %v; want b alone", both, a.Controlling(), b.Controlling())
		}
		sa.down.Store(false)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if a.Controlling() || !b.Controlling() {
			t.Fatalf("a back: a %v, b %v; want b alone", a.Controlling(), b.Controlling())
		}
	})
}

// interloper is a node's handle that lets another node's write go first
// (once armed): the next Put of a rollout finds its record changed.
type interloper struct {
	rollout.Storage
	first func()
}

func (s *interloper) Put(ctx context.Context, id string, value []byte, rev uint64) (uint64, error) {
	if f := s.first; f != nil {
		s.first = nil
		f()
		synctest.Wait() // this node's feed took the other's write in
	}
	return s.Storage.Put(ctx, id, value, rev)
}

// An operator's pause through one node while another's abort through
// another node is written first: the pause is done again on the aborted
// record and refused as on one server, and the abort holds on both
// nodes (the pause, undone on a conflict, once put the record back to
// running under the abort, and wrote its pause over it).
func TestPauseAfterAnAbortElsewhereRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, f := rollouttest.NewMem(), rollouttest.NewFleet()
		f.Connect("d1", "a", "v1")
		sa := &interloper{Storage: mem.Handle()}
		a := openNode(t, sa, f, "a")
		defer a.Close()
		b := openNode(t, mem.Handle(), f, "b")
		defer b.Close()
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		r, err := a.Create(rollouttest.Channel, rollout.Request{Version: "v2", Target: rollout.Target{All: true}}, "otto")
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		sa.first = func() {
			if _, err := b.Abort(rollouttest.Channel, r.ID, "ida"); err != nil {
				t.Errorf("abort through b: %v", err)
			}
		}
		_, err = a.Pause(rollouttest.Channel, r.ID, "otto")
		var e *rollout.Error
		if !errors.As(err, &e) || e.Status != 409 || e.Msg != "rollout "+r.ID+" is aborted, not running" {
			t.Fatalf("the pause after the abort: %v; want 409 as on one server", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		for name, m := range map[string]*rollout.Manager{"a": a, "b": b} {
			if got, _ := m.Get(rollouttest.Channel, r.ID); got.State != rollout.Aborted || got.Note != "aborted by ida" {
				t.Errorf("node %s: %s (%s); want aborted by ida", name, got.State, got.Note)
			}
		}
	})
}
