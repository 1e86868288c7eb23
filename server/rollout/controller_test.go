package rollout_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"termlink/internal/testwait"
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

// heldCreate is a node's handle whose next create of a record (a Put at
// revision 0), once armed, waits until released, as a NATS write
// waiting out an election does; it counts the lease reads (one a tick).
type heldCreate struct {
	rollout.Storage
	armed            atomic.Bool
	writing, release chan struct{}
	leases           atomic.Int64
}

func (h *heldCreate) Put(ctx context.Context, id string, value []byte, rev uint64) (uint64, error) {
	if rev == 0 && h.armed.CompareAndSwap(true, false) {
		close(h.writing)
		<-h.release
	}
	return h.Storage.Put(ctx, id, value, rev)
}

func (h *heldCreate) Lease(ctx context.Context) (string, uint64, error) {
	h.leases.Add(1)
	return h.Storage.Lease(ctx)
}

// Nothing is sent for a rollout before its record is stored, however
// long the write takes: the controller's ticks leave a rollout being
// created alone. They used to release its waves meanwhile; when the
// node's watch then brought the first write back before the write
// returned, the merge kept the released wave without its devices' new
// states, and a device connected to another node was never sent its
// frame (TestRolloutsContract on NATS, 2 runs in 20 under stress-ng).
func TestNothingSentBeforeTheRecordIsStored(t *testing.T) {
	mem, f := rollouttest.NewMem(), rollouttest.NewFleet()
	f.Connect("d1", "a", "v1")
	f.Connect("d2", "b", "v1")
	h := &heldCreate{Storage: mem.Handle(), writing: make(chan struct{}), release: make(chan struct{})}
	open := func(st rollout.Storage, node string) *rollout.Manager {
		opt := f.Options(node)
		opt.Tick, opt.Lease, opt.NoSync = 20*time.Millisecond, 300*time.Millisecond, true
		m, err := rollout.New(context.Background(), st, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	a := open(h, "a")
	testwait.Until(t, "node a controls", a.Controlling)
	open(mem.Handle(), "b") // d2 is connected to it
	h.armed.Store(true)
	type created struct {
		r   rollout.Rollout
		err error
	}
	done := make(chan created, 1)
	go func() {
		r, err := a.Create(rollouttest.Channel, rollout.Request{Version: "v2", Target: rollout.Target{All: true}}, "otto")
		done <- created{r, err}
	}()
	<-h.writing
	n := h.leases.Load()
	testwait.Until(t, "three ticks of node a while the record is written (or a frame sent)", func() bool {
		return h.leases.Load() >= n+3 || len(f.Sent("a", "d1")) != 0
	})
	if s := f.Sent("a", "d1"); len(s) != 0 {
		close(h.release)
		t.Fatalf("d1 was sent %d frames before the rollout's record was stored", len(s))
	}
	close(h.release)
	c := <-done
	if c.err != nil {
		t.Fatal(c.err)
	}
	for _, d := range []struct{ node, peer string }{{"a", "d1"}, {"b", "d2"}} {
		testwait.UntilOK(t, d.peer+" sent its frame through node "+d.node, func() error {
			if s := f.Sent(d.node, d.peer); len(s) != 1 || s[0].UpdateID != c.r.ID+".1" {
				return fmt.Errorf("sent %d frames", len(s))
			}
			return nil
		})
	}
}

// A device still pending in a wave already released (a release that
// never reached the record, as the merge above once lost it) is
// released by the controller: it would otherwise never be sent.
func TestPendingInAReleasedWaveIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, f := rollouttest.NewMem(), rollouttest.NewFleet()
		f.Connect("d1", "a", "v1")
		at := time.Now().UTC()
		r := rollout.Rollout{ID: "ro-0000000000f1", ChannelID: rollouttest.Channel, Version: "v2", Target: rollout.Target{All: true},
			Percent: 100, State: rollout.Running, Wave: 1, Waves: 2, CreatedBy: "otto", CreatedAt: at, UpdatedAt: at,
			Devices: []rollout.Device{{PeerID: "d1", Platform: "linux/arm/6", Wave: 1, State: rollout.Pending, Since: at, Running: "v1"}}}
		data, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rollout.Parse(data, 0); err != nil {
			t.Fatalf("the record of the test: %v", err)
		}
		if _, err := mem.Handle().Put(context.Background(), r.ID, data, 0); err != nil {
			t.Fatal(err)
		}
		a := openNode(t, mem.Handle(), f, "a")
		defer a.Close()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if s := f.Sent("a", "d1"); len(s) != 1 || s[0].UpdateID != r.ID+".1" {
			t.Fatalf("d1, pending in released wave 1: sent %+v; want its frame", s)
		}
		if got, _ := a.Get(rollouttest.Channel, r.ID); got.Devices[0].State != rollout.Sent {
			t.Fatalf("d1: %s, want sent", got.Devices[0].State)
		}
	})
}
