package registry

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"termlink/server/wal"
)

// maxDevice says as much about itself as connect lets it, with "<" that
// an HTML-escaping encoder would write as 6 bytes.
func maxDevice(peer string) Device {
	d := dev(peer, map[string]string{})
	d.DeviceName, d.Board, d.Version = strings.Repeat("<", MaxField), strings.Repeat("<", MaxField), strings.Repeat("<", MaxField)
	for i := range MaxTags {
		d.Tags[fmt.Sprintf("%02d", i)+strings.Repeat("k", MaxTagKey-2)] = strings.Repeat("<", MaxTagValue)
	}
	d.Capabilities = nil
	for i := range MaxCaps {
		d.Capabilities = append(d.Capabilities, fmt.Sprintf("%02d", i)+strings.Repeat("<", MaxField-2))
	}
	return d
}

func TestDeviceByteBudget(t *testing.T) {
	dir := t.TempDir()
	r := open(t, dir, nil)
	_, ignored, err := r.Connected(maxDevice("big"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ignored) == 0 || !strings.Contains(strings.Join(ignored, ";"), "budget") {
		t.Fatalf("nothing reported over budget: %q", ignored)
	}
	p, _ := r.Get("ch", "big")
	d := Device{DeviceName: p.DeviceName, Board: p.Board, Version: p.Version, Tags: p.Tags, Capabilities: p.Capabilities}
	if n := deviceBytes(d); n > MaxDeviceBytes || n < MaxDeviceBytes-300 {
		t.Fatalf("device bytes %d, want close to and at most %d", n, MaxDeviceBytes)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// As written: one line of the snapshot, "<" not escaped.
	b, err := os.ReadFile(filepath.Join(dir, snapshotFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) != 2 || bytes.Contains(b, []byte(`\u003c`)) {
		t.Fatalf("snapshot %d lines, escaped: %v", len(lines), bytes.Contains(b, []byte(`\u003c`)))
	}
	if n := len(lines[1]); n > MaxDeviceBytes+peerOverhead {
		t.Fatalf("a max-size device takes %d bytes on disk", n)
	}
}

func TestScreenByteBudget(t *testing.T) {
	r := open(t, t.TempDir(), nil)
	defer r.Close()
	gen, _, _ := r.Connected(dev("a", nil))
	rows := make([]string, MaxScreenRows)
	for i := range rows {
		rows[i] = strings.Repeat("#", MaxScreenRow)
	}
	r.SetScreen("ch", "a", gen, Screen{Rows: rows})
	p, _ := r.Get("ch", "a")
	n := 0
	for _, row := range p.Screen.Rows {
		n += len(row)
	}
	if n != MaxScreenBytes || len(p.Screen.Rows) != MaxScreenBytes/MaxScreenRow {
		t.Fatalf("screen of %d bytes in %d rows, want %d", n, len(p.Screen.Rows), MaxScreenBytes)
	}
	r.Disconnected("ch", "a", gen)
	if p, _ := r.Get("ch", "a"); p.Screen != nil {
		t.Fatal("an offline device keeps its screen mirror")
	}
}

// Past the anonymous cap a new anonymous device is refused and nothing
// changes; a known one is taken back. A full channel makes room for an
// authenticated device by forgetting an offline anonymous one first,
// never one with pending notices, and never for an anonymous one.
func TestAnonymousCapAndEviction(t *testing.T) {
	pending := map[string]int{"legit-notices": 1}
	r, err := Open(t.TempDir(), Options{FlushInterval: time.Hour, MaxPeers: 4, MaxAnonymous: 2,
		NoticesPending: func(_, peer string) int { return pending[peer] }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := &clock{time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)}
	r.now = c.now
	connectOff := func(d Device) {
		t.Helper()
		gen, _, err := r.Connected(d)
		if err != nil {
			t.Fatalf("%s: %v", d.PeerID, err)
		}
		c.t = c.t.Add(time.Minute)
		r.Disconnected("ch", d.PeerID, gen)
	}
	connectOff(authed(dev("legit-notices", map[string]string{"site": "lobby"}))) // seen longest ago
	connectOff(authed(dev("legit-lobby", map[string]string{"site": "lobby"})))
	connectOff(dev("anon-1", nil))
	connectOff(dev("anon-2", nil))
	ids := func() string {
		var out []string
		for _, p := range r.List("ch", Filter{}) {
			out = append(out, p.PeerID)
		}
		return strings.Join(out, " ")
	}
	before := ids()
	var full *FullError
	if _, _, err := r.Connected(dev("anon-3", nil)); !errors.As(err, &full) || !strings.Contains(err.Error(), "maximum of 4 devices") {
		t.Fatalf("anonymous past the bounds: %v", err)
	}
	if got := ids(); got != before {
		t.Fatalf("a refused connect changed the registry: %s, was %s", got, before)
	}
	if _, _, err := r.Connected(dev("anon-1", nil)); err != nil { // known: taken back
		t.Fatalf("known anonymous device refused: %v", err)
	}
	// Full: an authenticated newcomer takes the place of the offline
	// anonymous device seen longest ago (anon-2; anon-1 is online).
	if _, _, err := r.Connected(authed(dev("legit-new", nil))); err != nil {
		t.Fatal(err)
	}
	if got := ids(); got != "anon-1 legit-lobby legit-new legit-notices" {
		t.Fatalf("after an authenticated newcomer: %s", got)
	}
	// Then the authenticated one seen longest ago without notices.
	if _, _, err := r.Connected(authed(dev("legit-newer", nil))); err != nil {
		t.Fatal(err)
	}
	if got := ids(); got != "anon-1 legit-new legit-newer legit-notices" {
		t.Fatalf("after a second authenticated newcomer: %s", got)
	}
	// The anonymous cap alone: room in the channel, but 2 anonymous.
	r2, err := Open(t.TempDir(), Options{FlushInterval: time.Hour, MaxAnonymous: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	r2.Connected(dev("a", nil))
	r2.Connected(dev("b", nil))
	if _, _, err := r2.Connected(dev("c", nil)); err == nil || !strings.Contains(err.Error(), "maximum of 2 anonymous devices") {
		t.Fatalf("third anonymous device: %v", err)
	}
	if _, _, err := r2.Connected(authed(dev("c", nil))); err != nil {
		t.Fatalf("authenticated device refused: %v", err)
	}
	// A known anonymous device that authenticates stops counting as anonymous.
	r2.Connected(authed(dev("a", nil)))
	if _, _, err := r2.Connected(dev("d", nil)); err != nil {
		t.Fatalf("anonymous device after one authenticated: %v", err)
	}
	if u := r2.Usage("ch"); u.Peers != 4 || u.Anonymous != 2 {
		t.Fatalf("usage %+v", u)
	}
}

func TestChannelByteBudget(t *testing.T) {
	r, err := Open(t.TempDir(), Options{FlushInterval: time.Hour, MaxChannelBytes: 3 * (MaxDeviceBytes + peerOverhead + 100)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for ; n < 10; n++ {
		if _, _, err := r.Connected(maxDevice(fmt.Sprint("big-", n))); err != nil {
			if !strings.Contains(err.Error(), "bytes") {
				t.Fatalf("refusal %v", err)
			}
			break
		}
	}
	if n != 3 {
		t.Fatalf("%d max-size devices taken, want 3", n)
	}
	if u := r.Usage("ch"); u.Bytes > 3*(MaxDeviceBytes+peerOverhead+100) {
		t.Fatalf("usage %+v", u)
	}
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// A change writes the device, not the registry: 1,000 devices, then one
// reconnect, logs one small record and leaves the snapshot alone; once
// enough was logged a snapshot compacts the log.
func TestIncrementalLogAndCompaction(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir, Options{FlushInterval: time.Hour, SnapshotBytes: 128 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		r.Connected(dev(fmt.Sprintf("kiosk-%04d", i), map[string]string{"site": "lobby"}))
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, snapshotFile)
	st1, err := os.Stat(snap)
	if err != nil {
		t.Fatalf("no snapshot after logging %d bytes: %v", r.sinceSnap, err)
	}
	before := dirBytes(t, dir)
	r.Connected(dev("kiosk-0007", map[string]string{"site": "shop"}))
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	grew := dirBytes(t, dir) - before
	if grew <= 0 || grew > 2048 {
		t.Fatalf("one reconnect wrote %d bytes", grew)
	}
	if st2, _ := os.Stat(snap); !st2.ModTime().Equal(st1.ModTime()) || st2.Size() != st1.Size() {
		t.Fatal("one reconnect rewrote the snapshot")
	}
	// Enough changes: a new snapshot, and the log is released.
	for round := 0; round < 3; round++ {
		for i := range 1000 {
			r.Connected(dev(fmt.Sprintf("kiosk-%04d", i), map[string]string{"round": fmt.Sprint(round)}))
		}
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if r.sinceSnap >= max(r.opt.SnapshotBytes, r.snapBytes) {
		t.Fatalf("no compaction: %d bytes logged since the snapshot", r.sinceSnap)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := open(t, dir, nil)
	defer r2.Close()
	ps := r2.List("ch", Filter{})
	if len(ps) != 1000 || ps[7].Tags["round"] != "2" || ps[7].Online {
		t.Fatalf("after reopening: %d peers, kiosk-0007 %+v", len(ps), ps[7])
	}
}

// A torn last record (a crash mid-write) is cut on open; the devices
// written before it are there.
func TestTornTailRepaired(t *testing.T) {
	dir := t.TempDir()
	r := open(t, dir, nil)
	r.Connected(dev("a", nil))
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	r.Connected(dev("b", nil))
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	close(r.stop) // no Close: as after kill -9

	<-r.done
	_ = r.wl.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no log segment")
	}
	last := segs[len(segs)-1]
	st, _ := os.Stat(last)
	if err := os.Truncate(last, st.Size()-wal.MarkerSize-5); err != nil { // b's record torn (the end marker follows it)
		t.Fatal(err)
	}
	r2 := open(t, dir, nil)
	defer r2.Close()
	if got := peerIDs(r2.List("ch", Filter{})); got != "a" {
		t.Fatalf("after a torn tail: %q", got)
	}
}

func peerIDs(ps []Peer) string {
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.PeerID)
	}
	return strings.Join(ids, " ")
}

// Temporary files a kill left (snapshot, release mark) are removed on open.
func TestStaleTempFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	r := open(t, dir, nil)
	r.Connected(dev("a", nil))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"." + snapshotFile + ".123456.tmp", walDir + "/released.tmp"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r2 := open(t, dir, nil)
	defer r2.Close()
	if left := tempFiles(dir); len(left) != 0 {
		t.Fatalf("temporary files left after open: %v", left)
	}
	if got := peerIDs(r2.List("ch", Filter{})); got != "a" {
		t.Fatalf("peers %q", got)
	}
}

func tempFiles(dir string) []string {
	var out []string
	_ = filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(path, ".tmp") {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// A registry file of the earlier format is read once and replaced by a
// snapshot.
func TestEarlierFormatMigrated(t *testing.T) {
	dir := t.TempDir()
	old := `{"version":1,"channel_id":"ch","peers":[{"peer_id":"kiosk-1","session_id":"ch:acc:kiosk-1","device_name":"k",` +
		`"tags":{"site":"lobby"},"last_seen":"2026-11-23T18:02:00Z","last_message_at":"2026-11-23T18:01:00Z"}]}`
	if err := os.WriteFile(filepath.Join(dir, "ch.json"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	r := open(t, dir, nil)
	p, ok := r.Get("ch", "kiosk-1")
	if !ok || p.LastSeen != "2026-11-23T18:02:00Z" || *p.LastMessageAt != "2026-11-23T18:01:00Z" || p.Tags["site"] != "lobby" {
		t.Fatalf("migrated peer %+v", p)
	}
	r.Close()
	if _, err := os.Stat(filepath.Join(dir, "ch.json")); !os.IsNotExist(err) {
		t.Fatalf("earlier format's file still there: %v", err)
	}
	r2 := open(t, dir, nil)
	defer r2.Close()
	if _, ok := r2.Get("ch", "kiosk-1"); !ok {
		t.Fatal("migrated peer lost")
	}
}

// kill -9 of a process that writes the registry as fast as it can (new
// devices every round, a snapshot every few rounds) leaves a registry
// that opens with every device of the last flush that returned, offline,
// and no temporary file once opened.
func TestKill9(t *testing.T) {
	if os.Getenv("REGISTRY_KILL_CHILD") != "" {
		return
	}
	if testing.Short() {
		t.Skip("runs a child process")
	}
	for run := range 3 {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Child$", "-test.v")
		cmd.Env = append(os.Environ(), "REGISTRY_KILL_CHILD="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it once it has flushed some rounds (it says each, after
		// Flush returned); then count every round it said.
		timer := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
		sc := bufio.NewScanner(stdout)
		flushed, killed := 0, false
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "flushed ") {
				flushed++
			}
			if flushed == 5+run*7 && !killed {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				killed = true
			}
		}
		timer.Stop()
		_ = cmd.Wait()
		if !killed {
			t.Fatalf("run %d: the child made no progress (%d rounds)", run, flushed)
		}
		r := open(t, dir, nil)
		ps := r.List("ch", Filter{})
		if len(ps) < flushed*20 {
			t.Fatalf("run %d: %d devices after kill -9, want at least %d (%d rounds flushed)", run, len(ps), flushed*20, flushed)
		}
		for _, p := range ps {
			if p.Online {
				t.Fatalf("run %d: %s online after open", run, p.PeerID)
			}
		}
		if left := tempFiles(dir); len(left) != 0 {
			t.Fatalf("run %d: temporary files after open: %v", run, left)
		}
		r.Close()
	}
}

// TestKill9Child is TestKill9's child process.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv("REGISTRY_KILL_CHILD")
	if dir == "" {
		t.Skip("the child of TestKill9")
	}
	r, err := Open(dir, Options{FlushInterval: time.Hour, SnapshotBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 100000; round++ {
		for i := range 20 {
			r.Connected(maxDevice(fmt.Sprintf("r%06d-%02d", round, i)))
		}
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("flushed %d\n", round+1)
	}
}

// FuzzEncLen: encLen is the length the registry's encoder writes.
func FuzzEncLen(f *testing.F) {
	for _, s := range []string{"", "<>&", "a\"b\\c", "\n\r\t\b\f\x00\x1f", "é\u2028\u2029", "\xff\xfe", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b bytes.Buffer
		if err := newEncoder(&b).Encode(s); err != nil {
			t.Fatal(err)
		}
		if got, want := encLen(s), b.Len()-1; got != want {
			t.Fatalf("encLen(%q) = %d, encoder wrote %d: %s", s, got, want, b.Bytes())
		}
		var back string
		if err := json.Unmarshal(b.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
	})
}
