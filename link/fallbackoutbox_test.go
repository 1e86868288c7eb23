package link_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
)

func entryIDs(es []link.OutboxEntry) []string {
	var ids []string
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	return ids
}

// openFallback opens a FallbackOutbox that retries every 20ms and
// reports its changes on the channel; it is closed when the test ends.
func openFallback(t *testing.T, dir string) (*link.FallbackOutbox, <-chan error) {
	t.Helper()
	changes := make(chan error, 8)
	o, err := link.OpenFallbackOutbox(dir, link.FallbackOptions{FileOutboxOptions: link.FileOutboxOptions{Logger: discard},
		RetryEvery: 20 * time.Millisecond, OnChange: func(err error) { changes <- err }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o, changes
}

// waitChange waits for the next OnChange report.
func waitChange(t *testing.T, changes <-chan error) error {
	t.Helper()
	select {
	case err := <-changes:
		return err
	case <-time.After(testwait.Deadline):
		t.Fatal("no storage change reported")
		return nil
	}
}

// A state dir whose boot counter cannot be written (a directory where the
// file should be): the outbox opens in memory with the file's pending
// messages, takes new ones, and once the path is fixed stores them all
// durably with their ids, the ones answered meanwhile marked done.
func TestFallbackOutboxUnwritableAtStart(t *testing.T) {
	dir := t.TempDir()
	fo, err := link.OpenFileOutbox(dir, link.FileOutboxOptions{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := fo.Add("a")
	b, _ := fo.Add("b")
	fo.Close()
	boot := filepath.Join(dir, link.OutboxBootFile)
	if err := os.Remove(boot); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(boot, 0o700); err != nil {
		t.Fatal(err)
	}

	o, changes := openFallback(t, dir)
	if o.Problem() == nil || waitChange(t, changes) == nil {
		t.Fatal("no problem reported with a directory in place of the boot counter")
	}
	if got := entryIDs(o.Pending()); !slices.Equal(got, []string{a.ID, b.ID}) {
		t.Fatalf("pending in memory %v, want the file's %v", got, []string{a.ID, b.ID})
	}
	if err := o.Done(a.ID); err != nil {
		t.Fatal(err)
	}
	c, err := o.Add("c")
	if err != nil {
		t.Fatalf("Add in memory: %v", err)
	}
	if err := os.Remove(boot); err != nil {
		t.Fatal(err)
	}
	if err := waitChange(t, changes); err != nil {
		t.Fatalf("after the fix: %v", err)
	}
	want := []string{b.ID, c.ID}
	if got := entryIDs(o.Pending()); !slices.Equal(got, want) {
		t.Fatalf("pending after recovery %v, want %v", got, want)
	}
	d, err := o.Add("d")
	if err != nil || o.Problem() != nil {
		t.Fatalf("Add after recovery: %v, problem %v", err, o.Problem())
	}
	o.Close()
	again, err := link.OpenFileOutbox(dir, link.FileOutboxOptions{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := entryIDs(again.Pending()); !slices.Equal(got, append(want, d.ID)) {
		t.Fatalf("the file holds %v, want %v", got, append(want, d.ID))
	}
}

// A write that fails while running (here the compaction's rename onto a
// directory that took the file's place) moves the messages to memory
// without losing one; when the path works again they are stored.
func TestFallbackOutboxWriteFailsWhileRunning(t *testing.T) {
	dir := t.TempDir()
	o, changes := openFallback(t, dir)
	if o.Problem() != nil {
		t.Fatal(o.Problem())
	}
	var ids []string
	for i := range 70 {
		e, err := o.Add(fmt.Sprint("m", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	path := filepath.Join(dir, link.OutboxFile)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	// Enough done records make the outbox compact, which must fail.
	for _, id := range ids[:50] {
		if err := o.Done(id); err != nil {
			t.Fatalf("Done: %v", err)
		}
	}
	if err := waitChange(t, changes); err == nil {
		t.Fatal("the failed compaction was not reported")
	}
	if got := entryIDs(o.Pending()); !slices.Equal(got, ids[50:]) {
		t.Fatalf("pending in memory %d messages, want %d", len(got), len(ids[50:]))
	}
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	for {
		err := waitChange(t, changes)
		if err == nil {
			break
		}
		t.Logf("still in memory: %v", err)
	}
	if got := entryIDs(o.Pending()); !slices.Equal(got, ids[50:]) {
		t.Fatalf("pending after recovery: %d messages, want %d", len(got), len(ids[50:]))
	}
}

// Only another process holding the state dir is an error.
func TestFallbackOutboxStateDirInUse(t *testing.T) {
	dir := t.TempDir()
	fo, err := link.OpenFileOutbox(dir, link.FileOutboxOptions{Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer fo.Close()
	if _, err := link.OpenFallbackOutbox(dir, link.FallbackOptions{}); !errors.Is(err, link.ErrStateDirInUse) {
		t.Fatalf("second open: %v, want ErrStateDirInUse", err)
	}
}
