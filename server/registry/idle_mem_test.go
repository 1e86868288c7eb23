package registry

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// An online device that only connected and stays (the common case: an
// idle terminal) holds no extra state: its entry is the small one. A
// busy frame, a screen or a health report makes the extra state; a
// disconnect keeps only what is kept across connections.
func TestIdleEntryHoldsNoExtra(t *testing.T) {
	if s := unsafe.Sizeof(entry{}); s > 256 {
		t.Fatalf("an entry is %d bytes, want at most 256 (the size class an idle device's entry fits)", s)
	}
	r := open(t, t.TempDir(), &clock{time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)})
	defer r.Close()
	gen, _, err := r.Connected(dev("p1", nil))
	if err != nil {
		t.Fatal(err)
	}
	extra := func() *entryExtra {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.entryLocked("ch", "p1").x
	}
	r.mu.Lock()
	tags := r.entryLocked("ch", "p1").dev.Tags
	r.mu.Unlock()
	if tags != nil {
		t.Fatalf("a device without tags holds a map %v, want nil (a map is a heap object per device)", tags)
	}
	if p, _ := r.Get("ch", "p1"); p.Tags == nil {
		t.Fatal("the view's tags are nil, want an empty map (JSON {})")
	}
	r.MessageAccepted("ch", "p1")
	if x := extra(); x != nil {
		t.Fatalf("an online idle device's entry has extra state %+v, want none", *x)
	}
	if !r.SetBusy("ch", "p1", BusyState{Busy: true, Why: "run"}) {
		t.Fatal("SetBusy refused")
	}
	if p, ok := r.Get("ch", "p1"); !ok || p.Busy == nil || !p.Busy.Busy {
		t.Fatalf("busy not kept: %+v", p.Busy)
	}
	r.Disconnected("ch", "p1", gen)
	if x := extra(); x == nil || x.busy != nil {
		t.Fatal("busy kept past the disconnect")
	}
}

// TestMeasureIdleEntries reports the live heap per online idle device
// in the registry: HeapInuse after a collection with N connected
// (TERMLINK_MEASURE_N, default 10000), less that before, over N. A
// figure, not an assertion: TERMLINK_MEASURE=1 runs it.
func TestMeasureIdleEntries(t *testing.T) {
	if os.Getenv("TERMLINK_MEASURE") == "" {
		t.Skip("a measurement: TERMLINK_MEASURE=1 runs it")
	}
	n := 10000
	if s := os.Getenv("TERMLINK_MEASURE_N"); s != "" {
		fmt.Sscan(s, &n)
	}
	r := open(t, t.TempDir(), nil)
	defer r.Close()
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	for i := range n {
		d := Device{ChannelID: "terminal-dev", PeerID: fmt.Sprintf("dev-%d", i), SessionID: fmt.Sprintf("terminal-dev:local:dev-%d", i),
			RemoteAddr: fmt.Sprintf("127.0.0.1:%d", 30000+i%30000)}
		if _, _, err := r.Connected(d); err != nil {
			t.Fatal(err)
		}
	}
	after := heap()
	t.Logf("online idle devices: %d, heap in use %d -> %d bytes: %d bytes per device", n, before, after, int64(after-before)/int64(n))
}

// What a fleet's devices say alike is held once: the board, version and
// platform strings (interned), and the capability list the adapter
// shares (kept as given when nothing is dropped from it).
func TestDevicesShareWhatTheySayAlike(t *testing.T) {
	r := open(t, t.TempDir(), &clock{time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)})
	defer r.Close()
	caps := []string{"text", "screen"}
	for _, p := range []string{"p1", "p2"} {
		d := dev(p, nil)
		d.Board, d.Version = string([]byte("pi-lcd2004")), fmt.Sprint("1.2.", 3) // each its own copy, as decoded per connection
		d.Capabilities = caps
		if _, _, err := r.Connected(d); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	d1, d2 := r.entryLocked("ch", "p1").dev, r.entryLocked("ch", "p2").dev
	r.mu.Unlock()
	if unsafe.StringData(d1.Board) != unsafe.StringData(d2.Board) || unsafe.StringData(d1.Version) != unsafe.StringData(d2.Version) {
		t.Error("two devices' equal board and version are held twice")
	}
	if unsafe.SliceData(d1.Capabilities) != unsafe.SliceData(caps) || unsafe.SliceData(d2.Capabilities) != unsafe.SliceData(caps) {
		t.Error("a capability list with nothing dropped was copied per device")
	}
	// One dropped: a list of its own, without it, the given one untouched.
	d := dev("p3", nil)
	long := strings.Repeat("x", MaxField+1)
	d.Capabilities = []string{"text", long, "screen"}
	if _, _, err := r.Connected(d); err != nil {
		t.Fatal(err)
	}
	if p, _ := r.Get("ch", "p3"); !slices.Equal(p.Capabilities, []string{"text", "screen"}) || d.Capabilities[1] != long {
		t.Errorf("capabilities %v (given %d), want text and screen kept, the given list untouched", p.Capabilities, len(d.Capabilities))
	}
}

// What changed since the last flush is let go once written: after a
// burst of connects (a fleet back after a restart) and the flush, the
// idle fleet does not keep the burst's set (a cleared map keeps its
// table: about 30 bytes a device).
func TestFlushLetsGoOfTheBurstsSet(t *testing.T) {
	const n = 10000
	r := open(t, t.TempDir(), &clock{time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)})
	defer r.Close()
	for i := range n {
		if _, _, err := r.Connected(dev(fmt.Sprintf("dev-%05d", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	after := heap()
	freed := (int64(before) - int64(after)) / n
	t.Logf("heap %d -> %d bytes after the flush: %d bytes per device let go", before, after, freed)
	if freed < 10 {
		t.Fatalf("the flush let go of %d bytes per device, want the burst's set (at least 10)", freed)
	}
}

// An entry keeps one time for connected_since (online) and last_seen
// (offline): a message from an online device leaves its connected_since
// alone, a disconnect and a message after it move last_seen, and a
// reconnect starts connected_since anew; reconnects are counted through
// the entry's pointer.
func TestEntrySinceIsConnectedSinceOrLastSeen(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	c := &clock{t0}
	r := open(t, t.TempDir(), c)
	defer r.Close()
	at := func(d time.Duration) string { return formatTime(t0.Add(d)) }
	gen, _, err := r.Connected(dev("p1", nil))
	if err != nil {
		t.Fatal(err)
	}
	c.t = t0.Add(time.Minute)
	r.MessageAccepted("ch", "p1")
	p, _ := r.Get("ch", "p1")
	if p.ConnectedSince == nil || *p.ConnectedSince != at(0) || p.LastSeen != at(time.Minute) {
		t.Fatalf("online after a message: connected_since %v last_seen %s, want %s and %s", p.ConnectedSince, p.LastSeen, at(0), at(time.Minute))
	}
	if p.LastMessageAt == nil || *p.LastMessageAt != at(time.Minute) || p.ReconnectsLastHour != 0 {
		t.Fatalf("last message %v reconnects %d", p.LastMessageAt, p.ReconnectsLastHour)
	}
	c.t = t0.Add(2 * time.Minute)
	r.Disconnected("ch", "p1", gen)
	c.t = t0.Add(3 * time.Minute)
	if p, _ = r.Get("ch", "p1"); p.ConnectedSince != nil || p.LastSeen != at(2*time.Minute) {
		t.Fatalf("offline: connected_since %v last_seen %s, want none and %s", p.ConnectedSince, p.LastSeen, at(2*time.Minute))
	}
	r.MessageAccepted("ch", "p1") // a message accepted as the connection ended
	if p, _ = r.Get("ch", "p1"); p.LastSeen != at(3*time.Minute) {
		t.Fatalf("offline after a message: last_seen %s, want %s", p.LastSeen, at(3*time.Minute))
	}
	c.t = t0.Add(4 * time.Minute)
	if _, _, err := r.Connected(dev("p1", nil)); err != nil {
		t.Fatal(err)
	}
	if p, _ = r.Get("ch", "p1"); p.ConnectedSince == nil || *p.ConnectedSince != at(4*time.Minute) || p.ReconnectsLastHour != 1 {
		t.Fatalf("reconnected: connected_since %v reconnects %d, want %s and 1", p.ConnectedSince, p.ReconnectsLastHour, at(4*time.Minute))
	}
}
