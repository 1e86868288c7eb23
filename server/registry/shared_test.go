package registry

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"termlink/server/throttle"
)

// shared is d on the glob token glob, which may have max peers.
func shared(d Device, glob string, max int) Device {
	d.Authenticated, d.Shared, d.SharedMax = true, glob, int32(max)
	return d
}

// The peers of one glob token are counted against it: past its max a
// new peer id is refused (and nothing changes), a known one is taken
// back, another token's peers and devices with their own credential are
// not counted; the count survives a restart.
func TestSharedTokenCap(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir, Options{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, _, err := r.Connected(shared(dev(fmt.Sprint("kiosk-", i), nil), "kiosk-*", 3)); err != nil {
			t.Fatalf("kiosk-%d: %v", i, err)
		}
	}
	var capErr *SharedCapError
	_, _, err = r.Connected(shared(dev("kiosk-3", nil), "kiosk-*", 3))
	if !errors.As(err, &capErr) || capErr.Glob != "kiosk-*" || capErr.Max != 3 ||
		!strings.Contains(err.Error(), `the shared token of "kiosk-*" already has its maximum of 3 peers on channel ch (maxPeers`) {
		t.Fatalf("a fourth peer on the token: %v", err)
	}
	if _, ok := r.Get("ch", "kiosk-3"); ok {
		t.Fatal("the refused peer was registered")
	}
	if _, _, err := r.Connected(shared(dev("kiosk-0", nil), "kiosk-*", 3)); err != nil {
		t.Fatalf("a known peer of the token: %v", err)
	}
	if _, _, err := r.Connected(shared(dev("desk-0", nil), "desk-*", 3)); err != nil {
		t.Fatalf("another token's peer: %v", err)
	}
	if _, _, err := r.Connected(authed(dev("legit-1", nil))); err != nil {
		t.Fatalf("a device with its own credential: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r, err = Open(dir, Options{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, err := r.Connected(shared(dev("kiosk-3", nil), "kiosk-*", 3)); !errors.As(err, &capErr) {
		t.Fatalf("a fourth peer on the token after a restart: %v", err)
	}
	// A peer that moves to its own credential leaves the token's count.
	if _, _, err := r.Connected(authed(dev("kiosk-0", nil))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Connected(shared(dev("kiosk-3", nil), "kiosk-*", 3)); err != nil {
		t.Fatalf("a peer on the token once one left it: %v", err)
	}
}

// A peer with its own credential is never forgotten to make room for a
// peer of a glob token (nor for an anonymous one): a glob token's
// newcomers displace only anonymous devices and the glob tokens' own,
// and are refused when none is left; a device with its own credential
// still makes room (issue 36 row 6: 100,010 peers on one glob token
// evicted legit-1, which has its own token).
func TestSharedTokenNeverEvictsOwnCredential(t *testing.T) {
	r, err := Open(t.TempDir(), Options{FlushInterval: time.Hour, MaxPeers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := &clock{time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)}
	r.now = c.now
	connectOff := func(d Device) error {
		gen, _, err := r.Connected(d)
		if err != nil {
			return err
		}
		c.t = c.t.Add(time.Minute)
		r.Disconnected("ch", d.PeerID, gen)
		return nil
	}
	if err := connectOff(authed(dev("legit-1", nil))); err != nil { // seen longest ago
		t.Fatal(err)
	}
	if err := connectOff(dev("anon-1", nil)); err != nil {
		t.Fatal(err)
	}
	// Many peers on one glob token (no bound on it here): each displaces
	// the anonymous device or an earlier peer of the token, never legit-1.
	for i := range 20 {
		if err := connectOff(shared(dev(fmt.Sprint("kiosk-", i), nil), "kiosk-*", 0)); err != nil {
			t.Fatalf("kiosk-%d: %v", i, err)
		}
	}
	if _, ok := r.Get("ch", "legit-1"); !ok {
		t.Fatal("legit-1 (its own credential) was forgotten for peers of a glob token")
	}
	if _, ok := r.Get("ch", "anon-1"); ok {
		t.Fatal("the anonymous device was kept while peers of the glob token were forgotten")
	}
	// Only devices with their own credential left offline: a glob
	// token's newcomer is refused, one with its own credential is taken.
	if err := connectOff(authed(dev("legit-2", nil))); err != nil {
		t.Fatal(err)
	}
	if err := connectOff(authed(dev("legit-3", nil))); err != nil {
		t.Fatal(err)
	}
	var full *FullError
	if err := connectOff(shared(dev("kiosk-new", nil), "kiosk-*", 0)); !errors.As(err, &full) || !strings.Contains(err.Error(), "shared token") {
		t.Fatalf("a glob token's peer with only devices of their own credential to forget: %v", err)
	}
	if err := connectOff(dev("anon-2", nil)); !errors.As(err, &full) {
		t.Fatalf("an anonymous device in a full channel: %v", err)
	}
	for _, id := range []string{"legit-1", "legit-2", "legit-3"} {
		if _, ok := r.Get("ch", id); !ok {
			t.Fatalf("%s was forgotten", id)
		}
	}
	if err := connectOff(authed(dev("legit-4", nil))); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Get("ch", "legit-1"); ok {
		t.Fatal("a device with its own credential did not make room by forgetting the one seen longest ago")
	}
}

// The line of each device forgotten to make room goes through the gate:
// a burst, then held back for the summary.
func TestEvictionLineGated(t *testing.T) {
	var lines int
	sum := 0
	gate := throttle.New(slog.New(slog.NewTextHandler(countLines{&lines}, nil)), throttle.Options{Burst: 2, KindBurst: 2,
		Summary: func(s throttle.Summary) { sum += s.Held }})
	r, err := Open(t.TempDir(), Options{FlushInterval: time.Hour, MaxPeers: 1, Gate: gate,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range 20 {
		gen, _, err := r.Connected(shared(dev(fmt.Sprint("kiosk-", i), nil), "kiosk-*", 0))
		if err != nil {
			t.Fatal(err)
		}
		r.Disconnected("ch", fmt.Sprint("kiosk-", i), gen)
	}
	gate.Flush()
	if lines != 2 || sum != 17 {
		t.Fatalf("19 devices forgotten: %d lines written, %d held back for the summary (want 2 and 17)", lines, sum)
	}
}

type countLines struct{ n *int }

func (c countLines) Write(p []byte) (int, error) {
	*c.n += strings.Count(string(p), "\n")
	return len(p), nil
}
