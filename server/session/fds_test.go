package session

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"termlink/server/fdbudget"
)

// openIn counts the descriptors of this process open on files in dir
// (not dir itself).
func openIn(t *testing.T, dir string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	n := 0
	for _, e := range ents {
		p, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(p, dir+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// TestAppendsWithinTheBudget writes to many more sessions at once than the
// descriptor budget lets the store open: every append succeeds, in several (metadata rewrites among them)
// rounds, and the files the store holds open never exceed its share, even
// when sockets have taken everything else.
func TestAppendsWithinTheBudget(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("counts descriptors in /proc/self/fd")
	}
	for _, squeeze := range []bool{false, true} {
		t.Run(fmt.Sprintf("sockets_full=%v", squeeze), func(t *testing.T) {
			b := fdbudget.New(fdbudget.MinLimit) // session files: floor 8, at most 8
			pool := b.Pool(fdbudget.Files)
			if squeeze {
				sockets := b.Pool(fdbudget.Sockets)
				for sockets.TryAcquire(1) {
				}
			}
			var dir string
			var mu sync.Mutex
			peak := 0
			// NoSync: what is counted is the same without the fsyncs (the
			// 300 metadata rewrites' took seconds on a busy disk).
			s := openTest(t, Options{FDs: pool, SyncLater: true, NoSync: true, FailWrite: func(string) error {
				if n := openIn(t, dir); n > peak {
					mu.Lock()
					peak = n
					mu.Unlock()
				}
				return nil
			}})
			dir = s.Dir()
			ctx := context.Background()
			const sessions = 96    // twelve times the share
			for round := range 3 { // new files, then appends to existing ones
				var wg sync.WaitGroup
				errs := make(chan error, sessions)
				for k := range sessions {
					wg.Add(1)
					go func() {
						defer wg.Done()
						key := fmt.Sprintf("dev:%d", k)
						err := s.Append(ctx, key, Record{Role: "user", Content: fmt.Sprint(round), MessageID: fmt.Sprint(round)})
						if err == nil && round == 1 { // a rewrite drops the handle and opens two files
							err = s.UpdateMetadata(ctx, key, func(m map[string]any) { m["round"] = round })
						}
						errs <- err
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
				}
				if used := b.Stats().Used[fdbudget.Files]; used > b.Max(fdbudget.Files) {
					t.Fatalf("the store holds %d descriptors, its share is %d", used, b.Max(fdbudget.Files))
				}
			}
			for k := range sessions {
				sess, err := s.Load(fmt.Sprintf("dev:%d", k))
				if err != nil {
					t.Fatal(err)
				}
				if got := contents(sess.Records); strings.Join(got, ",") != "0,1,2" {
					t.Fatalf("dev:%d has %q", k, got)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if peak > b.Max(fdbudget.Files) || peak == 0 {
				t.Fatalf("up to %d files open in the session directory, the store's share is %d", peak, b.Max(fdbudget.Files))
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if used := b.Stats().Used[fdbudget.Files]; used != 0 || s.inUse != 0 {
				t.Fatalf("the store still holds %d descriptors after Close (%d counted in use)", used, s.inUse)
			}
		})
	}
}

// TestReadersWithinTheBudget: concurrent readers wait for a reader slot
// rather than open more files than the store keeps for them.
func TestReadersWithinTheBudget(t *testing.T) {
	t.Parallel()
	b := fdbudget.New(fdbudget.MinLimit)
	s := openTest(t, Options{FDs: b.Pool(fdbudget.Files)})
	ctx := context.Background()
	for k := range 20 {
		if err := s.Append(ctx, fmt.Sprintf("r:%d", k), Record{Role: "user", Content: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Tail(fmt.Sprintf("r:%d", i%20), 4); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(s.readers) != 0 {
		t.Fatalf("%d reader slots still taken", len(s.readers))
	}
}

// TestOpenRefusedWithoutDescriptors: a store that cannot get its minimum
// says so.
func TestOpenRefusedWithoutDescriptors(t *testing.T) {
	t.Parallel()
	b := fdbudget.New(fdbudget.MinLimit)
	files := b.Pool(fdbudget.Files)
	for files.TryAcquire(1) {
	}
	_, err := Open(t.TempDir(), Options{FDs: files, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "no file descriptors left") {
		t.Fatalf("Open with no descriptors: %v", err)
	}
}
