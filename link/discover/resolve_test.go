package discover

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"termlink/internal/testwait"
	"termlink/testrig/childtest"
	"testing"
	"time"
)

func TestFoundURL(t *testing.T) {
	f := Found{Instance: "lab1", Addr: net.IPv4(192, 0, 2, 7), Port: 8443,
		TXT: TXT{Paths: []string{"/api/channels/terminal-dev/ws", "/api/channels/lobby/ws"}, TLS: true}}
	for channel, want := range map[string]string{
		"lobby":        "wss://192.0.2.7:8443/api/channels/lobby/ws",
		"terminal-dev": "wss://192.0.2.7:8443/api/channels/terminal-dev/ws",
		"other":        "wss://192.0.2.7:8443/api/channels/terminal-dev/ws", // not served: the first path
	} {
		if got := f.URL(channel); got != want {
			t.Errorf("URL(%q) = %s, want %s", channel, got, want)
		}
	}
	f.TXT.TLS = false
	if got, want := f.URL("lobby"), "ws://192.0.2.7:8443/api/channels/lobby/ws"; got != want {
		t.Errorf("tls=0: URL = %s, want %s", got, want)
	}
}

func TestPick(t *testing.T) {
	bad := Found{Instance: "broken", Err: errors.New("TXT has no path=")}
	a := Found{Instance: "alpha", TXT: TXT{Paths: []string{"/a"}}}
	b := Found{Instance: "Beta", TXT: TXT{Paths: []string{"/b"}}}
	if got, err := Pick([]Found{bad, a, b}, ""); err != nil || got.Instance != "alpha" {
		t.Errorf("first usable = %q, %v; want alpha", got.Instance, err)
	}
	if got, err := Pick([]Found{bad, a, b}, "beta"); err != nil || got.Instance != "Beta" {
		t.Errorf("named beta = %q, %v; want Beta", got.Instance, err)
	}
	if _, err := Pick([]Found{a, b}, "gamma"); !errors.Is(err, ErrNoServer) || !strings.Contains(err.Error(), `named "gamma" (2 other answered)`) {
		t.Errorf("named gamma: %v", err)
	}
	if _, err := Pick([]Found{bad}, ""); !errors.Is(err, ErrNoServer) {
		t.Errorf("only a broken entry: %v, want ErrNoServer", err)
	}
}

// noSuchName is an instance nobody advertises: the browse really goes out
// on the LAN (a server advertised by another test may answer), and finds
// nothing under this name.
func noSuchName() string { return fmt.Sprintf("nobody-%d", rand.Uint64()) }

// When nothing answers, Resolve waits out its (bounded) window and uses
// --server-fallback, and says so on the display.
func TestResolveFallsBackWhenNothingAnswers(t *testing.T) {
	childtest.SkipMulticastUnderEmulator(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var shown []string
	dir := t.TempDir()
	res, err := Resolve(ctx, Options{Browse: BrowseOptions{Window: time.Second}, Name: noSuchName(),
		Fallback: "ws://10.0.0.9:8080/api/channels/terminal-dev/ws", StateDir: dir,
		Show: func(s string) { shown = append(shown, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != FromFallback || res.URL != "ws://10.0.0.9:8080/api/channels/terminal-dev/ws" {
		t.Fatalf("Resolve = %+v, want the fallback URL", res)
	}
	if !strings.Contains(res.Why, "no termserver answered") {
		t.Errorf("Why = %q", res.Why)
	}
	if len(shown) == 0 || shown[len(shown)-1] != "none; fallback" {
		t.Errorf("display showed %q, want it to end with \"none; fallback\"", shown)
	}
	for _, s := range shown {
		if len([]rune(s)) > 16 {
			t.Errorf("display line %q is wider than 16 columns", s)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, SavedURLFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a fallback was saved as the last-known URL: %v", err)
	}
}

// Without --server-fallback the URL saved by the last successful browse is
// used; with neither, the error says what is missing.
func TestResolveFallsBackToSavedURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	o := Options{Browse: BrowseOptions{Window: 500 * time.Millisecond}, Name: noSuchName(), StateDir: dir}
	_, err := Resolve(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "no --server-fallback") || !strings.Contains(err.Error(), "none saved yet") {
		t.Fatalf("nothing found, nothing saved: %v", err)
	}
	if err := saveURL(dir, "wss://lab1.example:8443/api/channels/terminal-dev/ws"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, SavedURLFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved file: %v, %v; want mode 0600", fi, err)
	}
	res, err := Resolve(ctx, o)
	if err != nil || res.Source != FromSaved || res.URL != "wss://lab1.example:8443/api/channels/terminal-dev/ws" {
		t.Fatalf("Resolve = %+v, %v; want the saved URL", res, err)
	}
	if err := os.WriteFile(filepath.Join(dir, SavedURLFile), []byte("http://x/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(ctx, o); err == nil || !strings.Contains(err.Error(), "not a ws:// or wss:// URL") {
		t.Fatalf("a bad saved URL: %v", err)
	}
}

// A context that ends before the browse gives its error, not a fallback.
func TestResolveCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Resolve(ctx, Options{Fallback: "ws://10.0.0.9:8080/x"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Resolve on a cancelled context: %v", err)
	}
}

// watchedCtx says when Browse first waits on it (calls Done).
type watchedCtx struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *watchedCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// A cancel ends a Browse at once, not at the end of its window (the mDNS
// library Browse used took a timeout only: this test waited out the
// hour, until go test's timeout).
func TestBrowseEndsOnCancel(t *testing.T) {
	childtest.SkipMulticastUnderEmulator(t)
	parent, cancel := context.WithCancel(context.Background())
	ctx := &watchedCtx{Context: parent, waiting: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		_, err := Browse(ctx, BrowseOptions{Window: time.Hour})
		errc <- err
	}()
	select {
	case <-ctx.waiting: // Browse is listening
	case err := <-errc:
		t.Fatalf("Browse ended before it listened: %v", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Browse after a cancel: %v, want context.Canceled", err)
	}
}

// Browse leaves no goroutine behind: its readers end with its sockets.
func TestBrowseLeavesNoGoroutines(t *testing.T) {
	childtest.SkipMulticastUnderEmulator(t)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := Browse(ctx, BrowseOptions{Window: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	testwait.UntilOK(t, "Browse's goroutines to end", func() error {
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			return fmt.Errorf("%d goroutines after Browse, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
		return nil
	})
}
