package registry

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func open(t *testing.T, dir string, c *clock) *Registry {
	t.Helper()
	r, err := Open(dir, Options{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if c != nil {
		r.now = c.now
	}
	return r
}

func dev(peer string, tags map[string]string) Device {
	return Device{ChannelID: "ch", PeerID: peer, SessionID: "ch:acc:" + peer, DeviceName: "name-" + peer, Board: "pi-lcd2004",
		Version: "1.2.3", Capabilities: []string{"text", "screen"}, Tags: tags, RemoteAddr: "127.0.0.1:5000"}
}

func authed(d Device) Device {
	d.Authenticated = true
	return d
}

func TestRestartKeepsDevicesOffline(t *testing.T) {
	dir := t.TempDir()
	c := &clock{time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)}
	r := open(t, dir, c)
	gen, _, _ := r.Connected(dev("kiosk-1", map[string]string{"site": "lobby"}))
	r.Connected(dev("kiosk-2", nil))
	c.t = c.t.Add(time.Minute)
	r.MessageAccepted("ch", "kiosk-1")
	r.Disconnected("ch", "kiosk-1", gen)
	c.t = c.t.Add(time.Minute)
	r.Connected(dev("kiosk-1", map[string]string{"site": "lobby"})) // a reconnect
	if p, _ := r.Get("ch", "kiosk-1"); p.ReconnectsLastHour != 1 || !p.Online {
		t.Fatalf("after reconnect: %+v", p)
	}
	if err := r.Close(); err != nil { // kiosk-1 and kiosk-2 still online
		t.Fatal(err)
	}

	c.t = c.t.Add(time.Minute)
	r2 := open(t, dir, c)
	defer r2.Close()
	peers := r2.List("ch", Filter{})
	if len(peers) != 2 || peers[0].PeerID != "kiosk-1" || peers[1].PeerID != "kiosk-2" {
		t.Fatalf("after restart: %+v", peers)
	}
	p := peers[0]
	want := Peer{PeerID: "kiosk-1", ChannelID: "ch", SessionID: "ch:acc:kiosk-1", DeviceName: "name-kiosk-1", Board: "pi-lcd2004",
		Version: "1.2.3", Capabilities: []string{"text", "screen"}, Tags: map[string]string{"site": "lobby"},
		LastSeen: "2026-11-23T18:02:00Z", RemoteAddr: "127.0.0.1:5000", ReconnectsLastHour: 1, LastMessageAt: ptr("2026-11-23T18:01:00Z"),
		Reconnects: [][2]int64{{time.Date(2026, 11, 23, 18, 2, 0, 0, time.UTC).Unix() / 60, 1}}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("kiosk-1 after restart:\n got %+v\nwant %+v", p, want)
	}
	for _, p := range peers {
		if p.Online || p.ConnectedSince != nil || p.Screen != nil {
			t.Errorf("%s is not offline after a restart: %+v", p.PeerID, p)
		}
	}
	c.t = c.t.Add(time.Hour)
	if p, _ := r2.Get("ch", "kiosk-1"); p.ReconnectsLastHour != 0 {
		t.Errorf("reconnects an hour later: %d", p.ReconnectsLastHour)
	}
}

func ptr(s string) *string { return &s }

func TestCorruptFileMovedAside(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ch.json"), []byte(`{"version":1,"channel_id":"ch","peers":[{`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := open(t, dir, nil)
	defer r.Close()
	if n := len(r.List("ch", Filter{})); n != 0 {
		t.Fatalf("%d peers from a torn file", n)
	}
	aside, _ := filepath.Glob(filepath.Join(dir, "ch.json.corrupt-*"))
	if len(aside) != 1 {
		t.Fatalf("torn file not moved aside: %v", aside)
	}
}

func TestFilters(t *testing.T) {
	r := open(t, t.TempDir(), nil)
	defer r.Close()
	g1, _, _ := r.Connected(authed(dev("a", map[string]string{"site": "lobby", "floor": "1"})))
	r.Connected(authed(dev("b", map[string]string{"site": "lobby", "floor": "2"})))
	r.Connected(authed(dev("c", map[string]string{"site": "shop"})))
	r.Connected(dev("d", map[string]string{"attacker": "chosen"})) // anonymous: no series of its own
	r.Disconnected("ch", "a", g1)
	yes, no := true, false
	tests := []struct {
		f    Filter
		want string
	}{
		{Filter{}, "a b c d"},
		{Filter{Tags: map[string]string{"site": "lobby"}}, "a b"},
		{Filter{Tags: map[string]string{"site": "lobby", "floor": "2"}}, "b"},
		{Filter{Tags: map[string]string{"site": "lobby"}, Online: &yes}, "b"},
		{Filter{Online: &no}, "a"},
		{Filter{Tags: map[string]string{"site": "Lobby"}}, ""},
		{Filter{Tags: map[string]string{"nope": "x"}}, ""},
	}
	for _, tt := range tests {
		var ids []string
		for _, p := range r.List("ch", tt.f) {
			ids = append(ids, p.PeerID)
		}
		if got := strings.Join(ids, " "); got != tt.want {
			t.Errorf("List(%+v) = %q, want %q", tt.f, got, tt.want)
		}
	}
	total, byTag := r.Online("ch", 100)
	if total != 3 || !reflect.DeepEqual(byTag, map[string]int{"site=lobby": 1, "floor=1": 0, "floor=2": 1, "site=shop": 1}) {
		t.Errorf("Online = %d %v", total, byTag)
	}
	// Past the series cap, online devices with a tag left out count once
	// under "other".
	total, byTag = r.Online("ch", 1)
	if total != 3 || len(byTag) != 2 || byTag[OtherTags] < 1 {
		t.Errorf("Online capped at 1 = %d %v", total, byTag)
	}
}

// A connection replaced by a newer one of the same device ends after the
// new one registered: the device stays online, and only the live
// connection's screens count.
func TestReplacedConnection(t *testing.T) {
	r := open(t, t.TempDir(), nil)
	defer r.Close()
	old, _, _ := r.Connected(dev("a", nil))
	cur, _, _ := r.Connected(dev("a", nil))
	r.Disconnected("ch", "a", old)
	if r.SetScreen("ch", "a", old, Screen{Rows: []string{"stale"}}) {
		t.Error("screen from the replaced connection taken")
	}
	if p, _ := r.Get("ch", "a"); !p.Online || p.Screen != nil {
		t.Fatalf("after the old connection ended: %+v", p)
	}
	r.Disconnected("ch", "a", cur)
	if p, _ := r.Get("ch", "a"); p.Online {
		t.Fatal("still online after its live connection ended")
	}
}

func TestScreenRateAndLatestWins(t *testing.T) {
	c := &clock{time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)}
	r := open(t, t.TempDir(), c)
	defer r.Close()
	gen, _, _ := r.Connected(dev("a", nil))
	sub := r.Subscribe("ch", 100)
	defer sub.Close()
	for i := range ScreensPerSecond {
		if !r.SetScreen("ch", "a", gen, Screen{Rows: []string{"frame", string(rune('0' + i))}}) {
			t.Fatalf("screen %d ignored", i)
		}
	}
	if r.SetScreen("ch", "a", gen, Screen{Rows: []string{"too many"}}) {
		t.Fatal("screen past the rate taken")
	}
	if p, _ := r.Get("ch", "a"); p.Screen.Rows[1] != "9" {
		t.Fatalf("latest screen %+v", p.Screen)
	}
	c.t = c.t.Add(time.Second)
	long := strings.Repeat("é", MaxScreenRow)
	if !r.SetScreen("ch", "a", gen, Screen{Rows: []string{long}, CursorRow: 1, Backlight: true}) {
		t.Fatal("screen in the next second ignored")
	}
	p, _ := r.Get("ch", "a")
	if len(p.Screen.Rows[0]) > MaxScreenRow || p.Screen.UpdatedAt != "2026-11-23T18:00:01Z" || !p.Screen.Backlight {
		t.Fatalf("screen %+v", p.Screen)
	}
	if n := len(sub.C()); n != ScreensPerSecond+1 {
		t.Fatalf("%d peer changes streamed, want %d", n, ScreensPerSecond+1)
	}
}

func TestSanitize(t *testing.T) {
	d := dev("a", map[string]string{"site": "lobby", "bad key": "x", "empty": "", "ctl": "a\nb"})
	d.DeviceName = strings.Repeat("n", 500)
	r := open(t, t.TempDir(), nil)
	defer r.Close()
	_, ignored, _ := r.Connected(d)
	p, _ := r.Get("ch", "a")
	if !reflect.DeepEqual(p.Tags, map[string]string{"site": "lobby"}) || len(p.DeviceName) != MaxField {
		t.Fatalf("peer %+v", p)
	}
	if len(ignored) != 4 {
		t.Fatalf("ignored %q", ignored)
	}
}

func TestParseTagFilter(t *testing.T) {
	got, err := ParseTagFilter([]string{"site:lobby", "floor:1:a"})
	if err != nil || !reflect.DeepEqual(got, map[string]string{"site": "lobby", "floor": "1:a"}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"site":            `tag "site": want key:value, e.g. tag=site:lobby`,
		":lobby":          `tag ":lobby": the key is empty`,
		"site:":           `tag "site:": the value is empty`,
		"si te:x":         `tag "si te:x": the key may hold only A-Z a-z 0-9 . _ - and must start with a letter or digit`,
		"site:a\x00":      `tag "site:a\x00": the value must be UTF-8 text without control characters`,
		"site:a,site:b":   "",
		"k:" + "\xff\xfe": `tag "k:\xff\xfe": the value must be UTF-8 text without control characters`,
	} {
		_, err := ParseTagFilter([]string{in})
		if want == "" {
			if err != nil {
				t.Errorf("%q: %v", in, err)
			}
			continue
		}
		if err == nil || err.Error() != want {
			t.Errorf("%q: error %v, want %s", in, err, want)
		}
	}
	if _, err := ParseTagFilter([]string{"site:a", "site:b"}); err == nil {
		t.Error("two values for one key accepted")
	}
}

// FuzzParseTagFilter: any query value is parsed or refused; what is
// parsed is a tag a device may carry, and round-trips.
func FuzzParseTagFilter(f *testing.F) {
	for _, s := range []string{"site:lobby", "", ":", "a:b:c", "site:", "é:x", "k:\x00", strings.Repeat("k", 70) + ":v"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseTagFilter([]string{s})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tag ") {
				t.Fatalf("error %q does not name the tag", err)
			}
			return
		}
		if len(m) != 1 {
			t.Fatalf("%q gave %v", s, m)
		}
		for k, v := range m {
			if k+":"+v != s || checkTagKey(k) != nil || checkTagValue(v) != nil {
				t.Fatalf("%q gave %q:%q", s, k, v)
			}
			d, ignored := sanitize(Device{Tags: map[string]string{k: v}})
			if len(ignored) != 0 || d.Tags[k] != v {
				t.Fatalf("a tag the filter takes is refused from a device: %q", ignored)
			}
		}
	})
}

// What fleet parts write of a device is logged with it (not only in a
// snapshot): a registry that stopped without its last snapshot (a
// kill: its files as the flush left them) has the update state and the
// settings refusal once the log is replayed, and their bytes counted.
func TestFleetStateLogged(t *testing.T) {
	dir := t.TempDir()
	r := open(t, dir, nil)
	defer r.Close()
	for _, id := range []string{"kiosk-1", "kiosk-2"} {
		if _, _, err := r.Connected(dev(id, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	r.SetUpdate("ch", "kiosk-1", UpdateState{Version: "2.0.0", State: "failed", Reason: "checksum mismatch"})
	r.SetSettings("ch", "kiosk-2", 3, "idle_text: the display cannot show it")
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, snapshotFile)); err == nil {
		t.Fatal("a snapshot was written: the test reads the log")
	}
	want := r.Usage("ch")
	killed := t.TempDir()
	if err := os.CopyFS(killed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	r2 := open(t, killed, nil)
	defer r2.Close()
	p1, _ := r2.Get("ch", "kiosk-1")
	p2, _ := r2.Get("ch", "kiosk-2")
	if p1.Update == nil || p1.Update.State != "failed" || p1.Update.Reason != "checksum mismatch" || p2.SettingsError != "idle_text: the display cannot show it" {
		t.Errorf("after replaying the log: kiosk-1's update %+v, kiosk-2's settings error %q", p1.Update, p2.SettingsError)
	}
	if got := r2.Usage("ch"); got != want {
		t.Errorf("usage after replaying the log %+v, want %+v", got, want)
	}
}
