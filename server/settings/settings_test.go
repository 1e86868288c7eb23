package settings

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/link"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/registry"
	"termlink/server/throttle"
)

// fakeRegistry is the device registry as the store reads it.
type fakeRegistry struct {
	mu    sync.Mutex
	peers map[string]registry.Peer // peer id -> peer (one channel)
}

func (r *fakeRegistry) Get(_, peer string) (registry.Peer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.peers[peer]
	return p, ok
}

func (r *fakeRegistry) List(_ string, f registry.Filter) []registry.Peer {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []registry.Peer
	for _, id := range slices.Sorted(maps.Keys(r.peers)) {
		if p := r.peers[id]; f.Online == nil || p.Online == *f.Online {
			out = append(out, p)
		}
	}
	return out
}

func (r *fakeRegistry) SetTags(_, peer string, tags map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.peers[peer]
	if ok {
		p.Tags = tags
		r.peers[peer] = p
	}
	return ok
}

// rig is a store with a fake registry, the frames it sent and its events.
type rig struct {
	*Store
	reg    *fakeRegistry
	mu     sync.Mutex
	sent   map[string][]link.Settings // peer -> frames, in order
	events []events.Event
}

func newRig(t *testing.T, dir string, opt Options) *rig {
	t.Helper()
	r := &rig{reg: &fakeRegistry{peers: map[string]registry.Peer{}}, sent: map[string][]link.Settings{}}
	opt.Dir, opt.NoSync = dir, true
	opt.Log = slog.New(slog.NewTextHandler(&syncbuf.Buffer{}, nil))
	st, err := Open(opt, Deps{Registry: r.reg,
		Send: func(_, peer string, f link.Frame) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			p, _ := r.reg.Get("", peer)
			if !p.Online || !slices.Contains(p.Capabilities, link.CapSettings) {
				return false
			}
			r.sent[peer] = append(r.sent[peer], *f.(*link.Settings))
			return true
		},
		Event: func(_ string, e events.Event) {
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
		},
		Channel: func(id string) bool { return id == "ch" },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Store = st
	return r
}

func (r *rig) device(id string, online, capable bool, tags map[string]string) {
	p := registry.Peer{PeerID: id, Online: online, Tags: tags}
	if capable {
		p.Capabilities = []string{link.CapSettings}
	}
	r.reg.mu.Lock()
	r.reg.peers[id] = p
	r.reg.mu.Unlock()
}

func (r *rig) frames(peer string) []link.Settings {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent[peer])
}

func (r *rig) eventsOf(name string) []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []events.Event
	for _, e := range r.events {
		if e.Event == name {
			out = append(out, e)
		}
	}
	return out
}

func str(s string) *string { return &s }
func num(n int) *int       { return &n }

func put(t *testing.T, r *rig, sel Selector, f link.Settings) Change {
	t.Helper()
	c, err := r.Put("ch", sel, f, "op")
	if err != nil {
		t.Fatalf("Put %s: %v", sel, err)
	}
	return c
}

// A device's settings: its tags' documents in key=value order (a later
// one wins per field), then its peer document; a peer document's tags
// are the tags matched. A field nobody sets is left out.
func TestEffective(t *testing.T) {
	r := newRig(t, t.TempDir(), Options{})
	put(t, r, Selector{Key: "site", Value: "lobby"}, link.Settings{IdleText: str("Lobby"), IdleSeconds: num(30), LogLevel: "info"})
	put(t, r, Selector{Key: "floor", Value: "2"}, link.Settings{IdleText: str("Floor 2"), NoticeSeconds: num(20)})
	put(t, r, Selector{Key: "site", Value: "cafe"}, link.Settings{IdleText: str("Cafe")})
	put(t, r, Selector{PeerID: "p1"}, link.Settings{LogLevel: "debug"})
	put(t, r, Selector{PeerID: "p2"}, link.Settings{Tags: map[string]string{"site": "cafe"}, BacklightOffAfter: num(60)})

	e := r.Effective("ch", "p1", map[string]string{"site": "lobby", "floor": "2", "x": "y"})
	s := e.Settings
	// "floor=2" < "site=lobby": the lobby's idle text wins.
	if s.Version != 5 || *s.IdleText != "Lobby" || *s.IdleSeconds != 30 || *s.NoticeSeconds != 20 || s.LogLevel != "debug" ||
		s.BacklightOffAfter != nil || s.Tags != nil {
		t.Errorf("p1: %+v", s)
	}
	if want := []string{"tag floor=2", "tag site=lobby", "peer"}; !reflect.DeepEqual(e.Sources, want) {
		t.Errorf("p1 sources %q, want %q", e.Sources, want)
	}
	// p2's document gives it site=cafe: the lobby's document no longer applies.
	e = r.Effective("ch", "p2", map[string]string{"site": "lobby"})
	if s := e.Settings; *s.IdleText != "Cafe" || s.IdleSeconds != nil || *s.BacklightOffAfter != 60 || s.Tags["site"] != "cafe" {
		t.Errorf("p2: %+v sources %q", s, e.Sources)
	}
	if e := r.Effective("ch", "p3", nil); e.Settings.Version != 5 || e.Settings.IdleText != nil || len(e.Sources) != 0 {
		t.Errorf("p3 (no document applies): %+v", e)
	}
	if e := r.Effective("other", "p1", nil); e.Settings.Version != 0 {
		t.Errorf("a channel without documents: %+v", e)
	}
}

// Every change bumps the channel's version and is pushed, at once, to
// each online device that listed "settings" (offline ones and others
// are not sent anything); the documents and the version survive a
// reopen; a change is an event.
func TestChangePushedAndKept(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir, Options{})
	r.device("a", true, true, map[string]string{"site": "lobby"})
	r.device("b", true, true, nil)
	r.device("off", false, true, map[string]string{"site": "lobby"})
	r.device("old", true, false, map[string]string{"site": "lobby"})

	c := put(t, r, Selector{Key: "site", Value: "lobby"}, link.Settings{IdleText: str("Welcome")})
	if c.Version != 1 || c.Pushed != 2 {
		t.Fatalf("put: %+v, want version 1 pushed to 2", c)
	}
	if f := r.frames("a"); len(f) != 1 || f[0].Version != 1 || *f[0].IdleText != "Welcome" {
		t.Fatalf("a got %+v", f)
	}
	if f := r.frames("b"); len(f) != 1 || f[0].Version != 1 || f[0].IdleText != nil {
		t.Fatalf("b (no tag) got %+v", f)
	}
	if len(r.frames("off")) != 0 || len(r.frames("old")) != 0 {
		t.Fatal("an offline device, or one without the capability, was sent settings")
	}
	c, err := r.Delete("ch", Selector{Key: "site", Value: "lobby"}, "op")
	if err != nil || c.Version != 2 {
		t.Fatalf("delete: %+v %v", c, err)
	}
	if f := r.frames("a"); len(f) != 2 || f[1].Version != 2 || f[1].IdleText != nil {
		t.Fatalf("after the delete a got %+v", f)
	}
	if _, err := r.Delete("ch", Selector{Key: "site", Value: "lobby"}, "op"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
	put(t, r, Selector{PeerID: "a"}, link.Settings{LogLevel: "warn", Tags: map[string]string{"site": "cafe"}})
	if ev := r.eventsOf(EventChanged); len(ev) != 3 || !strings.Contains(ev[0].Detail, `tag site=lobby: set idle_text="Welcome" by op (version 1, pushed to 2 online)`) ||
		!strings.Contains(ev[1].Detail, "deleted") || ev[2].PeerID != "a" {
		t.Fatalf("events %+v", ev)
	}

	r2 := newRig(t, dir, Options{})
	snap := r2.Channel("ch")
	if snap.Version != 3 || len(snap.Tags) != 0 || snap.Peers["a"] == nil || snap.Peers["a"].LogLevel != "warn" || snap.Peers["a"].UpdatedBy != "op" {
		t.Fatalf("reopened: %+v", snap)
	}
	c = put(t, r2, Selector{PeerID: "b"}, link.Settings{LogLevel: "error"})
	if c.Version != 4 {
		t.Fatalf("the version after a reopen went to %d, want 4", c.Version)
	}
}

// A device that connects with another version than the channel's gets
// its settings; one that has it, or did not list "settings", does not;
// nothing is sent before the first document.
func TestDeviceConnected(t *testing.T) {
	r := newRig(t, t.TempDir(), Options{})
	r.device("a", true, true, nil)
	connect := func(v int64, caps ...string) {
		r.DeviceConnected("ch", &link.Connect{PeerID: "a", SettingsVersion: v, Capabilities: caps, Tags: map[string]string{"site": "lobby"}})
	}
	connect(0, link.CapSettings)
	if len(r.frames("a")) != 0 {
		t.Fatal("settings sent before there are any")
	}
	r.device("a", false, true, nil) // offline during the change
	put(t, r, Selector{Key: "site", Value: "lobby"}, link.Settings{IdleText: str("Hi")})
	r.device("a", true, true, nil)
	connect(1, link.CapSettings)
	connect(0)
	if len(r.frames("a")) != 0 {
		t.Fatal("sent to a device that has the version, or did not list settings")
	}
	connect(0, link.CapSettings)
	if f := r.frames("a"); len(f) != 1 || f[0].Version != 1 || *f[0].IdleText != "Hi" {
		t.Fatalf("connect with version 0: sent %+v", f)
	}
	connect(7, link.CapSettings) // a version this server never gave (its settings were lost): brought back
	if f := r.frames("a"); len(f) != 2 || f[1].Version != 1 {
		t.Fatalf("connect with version 7: sent %+v", f)
	}
}

// An ack is an event once (the device resends it on every connect); a
// refusal carries the device's reason; an ack of settings that set the
// device's tags puts them in the registry.
func TestReport(t *testing.T) {
	r := newRig(t, t.TempDir(), Options{})
	r.device("a", true, true, map[string]string{"site": "lobby"})
	put(t, r, Selector{PeerID: "a"}, link.Settings{Tags: map[string]string{"site": "cafe", "floor": "2"}})
	r.Report("ch", "a", &link.SettingsAck{Version: 1, Error: "idle_text: the display cannot show it"})
	if p, _ := r.reg.Get("", "a"); p.Tags["site"] != "lobby" {
		t.Fatalf("tags changed by a refusal: %v", p.Tags)
	}
	r.Report("ch", "a", &link.SettingsAck{Version: 1})
	r.Report("ch", "a", &link.SettingsAck{Version: 1}) // resent on a connect
	r.Report("ch", "a", &link.UpdateStatus{Version: "v1", State: link.UpdateInstalled})
	if ev := r.eventsOf(EventRefused); len(ev) != 1 || ev[0].Detail != "version 1: idle_text: the display cannot show it" || ev[0].PeerID != "a" {
		t.Fatalf("refused events %+v", ev)
	}
	if ev := r.eventsOf(EventApplied); len(ev) != 1 || ev[0].Detail != "version 1" {
		t.Fatalf("applied events %+v", ev)
	}
	if p, _ := r.reg.Get("", "a"); !reflect.DeepEqual(p.Tags, map[string]string{"site": "cafe", "floor": "2"}) {
		t.Fatalf("registry tags after the ack: %v", p.Tags)
	}
	// The ack of an older version (a newer one is on its way) leaves the tags.
	put(t, r, Selector{PeerID: "a"}, link.Settings{Tags: map[string]string{"site": "roof"}})
	r.Report("ch", "a", &link.SettingsAck{Version: 1})
	if p, _ := r.reg.Get("", "a"); p.Tags["site"] != "cafe" {
		t.Fatalf("a stale ack set tags %v", p.Tags)
	}
}

// Values refused, each naming its field.
func TestCheck(t *testing.T) {
	longTags := map[string]string{}
	for i := range 20 {
		longTags[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", 100)
	}
	manyTags := map[string]string{}
	for i := range registry.MaxTags + 1 {
		manyTags[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, tc := range []struct {
		f       link.Settings
		forPeer bool
		want    string // "" accepted
	}{
		{link.Settings{IdleText: str("Hello\nworld")}, false, ""},
		{link.Settings{IdleSeconds: num(0)}, false, ""},
		{link.Settings{Tags: map[string]string{"site": "lobby"}}, true, ""},
		{link.Settings{}, true, "settings: the document sets nothing"},
		{link.Settings{IdleSeconds: num(-1)}, false, "idle_seconds: must not be negative"},
		{link.Settings{BacklightOffAfter: num(-5)}, false, "backlight_off_after: must not be negative"},
		{link.Settings{NoticeSeconds: num(link.MaxSettingsSeconds + 1)}, false, "notice_seconds: is 604801 seconds, at most 604800"},
		{link.Settings{LogLevel: "trace"}, false, `log_level: must be debug, info, warn or error; got "trace"`},
		{link.Settings{IdleText: str(strings.Repeat("x", link.MaxIdleText+1))}, false, "idle_text: is 257 bytes, at most 256"},
		{link.Settings{IdleText: str("a\tb")}, false, "idle_text: must be text without control characters"},
		{link.Settings{Tags: map[string]string{"site": "lobby"}}, false, "tags: only a peer's document"},
		{link.Settings{Tags: map[string]string{}}, true, "tags: is empty"},
		{link.Settings{Tags: map[string]string{"bad key": "v"}}, true, `tags: tag "bad key": the key may hold only`},
		{link.Settings{Tags: map[string]string{"k": ""}}, true, `tags: tag "k": the value is empty`},
		{link.Settings{Tags: manyTags}, true, "tags: 33 tags: at most 32"},
		{link.Settings{Tags: longTags}, true, "tags: the tags take"},
	} {
		err := Check(tc.f, tc.forPeer)
		var fe *FieldError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v refused: %v", tc.f, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.As(err, &fe)):
			t.Errorf("%+v: %v, want %q", tc.f, err, tc.want)
		}
	}
}

// Past MaxDocuments a new document is refused (a change of one there
// is still taken); a write that fails leaves the documents as they were.
func TestBoundsAndWriteFailure(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir, Options{MaxDocuments: 2})
	put(t, r, Selector{PeerID: "a"}, link.Settings{LogLevel: "info"})
	put(t, r, Selector{Key: "k", Value: "v"}, link.Settings{LogLevel: "info"})
	if _, err := r.Put("ch", Selector{PeerID: "b"}, link.Settings{LogLevel: "info"}, "op"); !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "at most 2") {
		t.Fatalf("a third document: %v", err)
	}
	put(t, r, Selector{PeerID: "a"}, link.Settings{LogLevel: "warn"})

	// settings.json replaced by a directory: the rename fails.
	path := filepath.Join(dir, FileName)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put("ch", Selector{PeerID: "a"}, link.Settings{LogLevel: "error"}, "op"); err == nil {
		t.Fatal("a change that could not be written was taken")
	}
	if _, err := r.Delete("ch", Selector{PeerID: "a"}, "op"); err == nil {
		t.Fatal("a delete that could not be written was taken")
	}
	if snap := r.Channel("ch"); snap.Version != 3 || snap.Peers["a"].LogLevel != "warn" {
		t.Fatalf("after failed writes: version %d, a %+v", snap.Version, snap.Peers["a"])
	}
}

// Files refused, each saying what is wrong; a good one round-trips.
func TestParseFile(t *testing.T) {
	good := `{"channels": {"ch": {"version": 3, "tags": {"site=lobby": {"idle_text": "Hi", "version": 2, "updated_at": "2026-01-01T00:00:00Z"}},
		"peers": {"p1": {"tags": {"a": "b"}, "version": 3, "updated_at": "2026-01-01T00:00:00Z", "updated_by": "op"}}}}}`
	f, err := ParseFile([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Channels["ch"]; c.Version != 3 || *c.Tags["site=lobby"].IdleText != "Hi" || c.Peers["p1"].Tags["a"] != "b" {
		t.Fatalf("parsed %+v", c)
	}
	for _, tc := range []struct{ file, want string }{
		{``, "the file is empty"},
		{`[]`, "not a settings file"},
		{`{}`, `"channels" is missing`},
		{`{"channels": {}, "x": 1}`, `unknown field "x"`},
		{`{"channels": {"ch": {"version": 1}}, "channels": {}}`, `key "channels" twice`},
		{`{"channels": {"ch": null}}`, "channels.ch: null"},
		{`{"channels": {"ch": {"version": -1}}}`, "channels.ch.version: negative"},
		{`{"channels": {"ch": {"version": 1, "tags": {"site": {"idle_text": "a", "version": 1}}}}}`, "want key=value"},
		{`{"channels": {"ch": {"version": 1, "tags": {"s ite=x": {"idle_text": "a", "version": 1}}}}}`, "the key may hold only"},
		{`{"channels": {"ch": {"version": 1, "tags": {"site=x": {"idle_text": "a", "version": 2}}}}}`, "version: 2, want 1 to the channel's 1"},
		{`{"channels": {"ch": {"version": 1, "tags": {"site=x": {"idle_seconds": -1, "version": 1}}}}}`, "channels.ch.tags.site=x.idle_seconds: must not be negative"},
		{`{"channels": {"ch": {"version": 1, "tags": {"site=x": {"tags": {"a": "b"}, "version": 1}}}}}`, "only a peer's document"},
		{`{"channels": {"ch": {"version": 1, "peers": {"p": {"version": 1}}}}}`, "the document sets nothing"},
		{`{"channels": {"ch": {"version": 1, "peers": {"p": {"idle_text": "a", "colour": 1, "version": 1}}}}}`, `unknown field "colour"`},
		{`{"channels": {"ch": {"version": 1, "peers": {"p": {"Idle_Text": "a", "version": 1}}}}}`, `channels.ch.peers.p: unknown field "Idle_Text"`},
		{`{"Channels": {}}`, `unknown field "Channels"`},
		{`{"channels": {"ch": {"Version": 1}}}`, `channels.ch: unknown field "Version"`},
		{`{"channels": {"ch": {"version": 1, "peers": {"": {"idle_text": "a", "version": 1}}}}}`, "the peer id is empty"},
		{"{\"channels\": {\"ch\": {\"version\": 1, \"peers\": {\"p\": {\"idle_text\": \"\xff\", \"version\": 1}}}}}", "not valid UTF-8"},
	} {
		if _, err := ParseFile([]byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.file, err, tc.want)
		}
	}
	// A file that does not parse stops Open, naming it.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(`{"channels": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}, Deps{}); err == nil || !strings.Contains(err.Error(), FileName) {
		t.Fatalf("Open of a bad file: %v", err)
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte(`{"channels": {"ch": {"version": 3, "tags": {"site=lobby": {"idle_text": "Hi", "version": 2}}, "peers": {"p1": {"tags": {"a": "b"}, "log_level": "warn", "version": 3}}}}}`))
	f.Add([]byte(`{"channels": {}}`))
	f.Add([]byte(`{"channels": {"c": {"version": 1, "peers": {"p": {"idle_seconds": 5, "version": 1}}}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		parsed, err := ParseFile(b)
		if err != nil {
			return
		}
		// What parses is written back and parses to the same.
		dir := t.TempDir()
		s := &Store{opt: Options{Dir: dir, NoSync: true}, chans: parsed.Channels}
		if err := s.writeLocked(parsed.Channels); err != nil {
			t.Fatal(err)
		}
		b2, err := os.ReadFile(filepath.Join(dir, FileName))
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseFile(b2)
		if err != nil {
			t.Fatalf("written back, it does not parse: %v\n%s", err, b2)
		}
		if !reflect.DeepEqual(again, parsed) {
			t.Fatalf("round trip changed it:\n%+v\n%+v", parsed, again)
		}
	})
}

// The API: writes, reads, a device's view, and bad input answered 400
// naming the field.
func TestAPI(t *testing.T) {
	r := newRig(t, t.TempDir(), Options{})
	r.device("a", true, true, map[string]string{"site": "lobby"})
	mux := http.NewServeMux()
	r.Routes(mux)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req = httpapi.WithOperator(req, httpapi.Operator{Name: "otto"})
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	const base = "/api/channels/ch/settings"
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"PUT", base + "/tags/site/lobby", `{"idle_text": "Welcome", "idle_seconds": 30}`, 200, `"version": 1`},
		{"PUT", base + "/tags/site/lobby", `{"idle_text": "Welcome", "idle_secs": 30}`, 400, `unknown field \"idle_secs\"`},
		{"PUT", base + "/tags/site/lobby", `{"idle_seconds": -3}`, 400, "idle_seconds: must not be negative"},
		{"PUT", base + "/tags/site/lobby", `{"idle_seconds": "3"}`, 400, "idle_seconds"},
		{"PUT", base + "/tags/site/lobby", `{"log_level": "loud"}`, 400, "log_level: must be debug"},
		{"PUT", base + "/tags/site/lobby", `{"log_level": "info", "version": 9}`, 400, "version: the server sets it"},
		{"PUT", base + "/tags/site/lobby", ``, 400, "the document sets nothing"},
		{"PUT", base + "/tags/site/lobby", `{"idle_text": "` + strings.Repeat("x", MaxDocumentBytes) + `"}`, 413, "longer than 4096 bytes"},
		{"PUT", base + "/tags/si%20te/lobby", `{"log_level": "info"}`, 400, `tag \"si te=lobby\": the key may hold only`},
		{"PUT", base + "/peers/a", `{"tags": {"site": "lobby", "bad key": "x"}}`, 400, "tags: tag"},
		{"PUT", base + "/peers/a", `{"log_level": "debug"}`, 200, `"pushed": 1`},
		{"PUT", "/api/channels/nope/settings/peers/a", `{"log_level": "debug"}`, 404, `no channel \"nope\"`},
		{"DELETE", base + "/peers/zz", ``, 404, "no document for peer zz"},
		{"GET", base, ``, 200, `"tag": "site=lobby"`},
		{"GET", "/api/channels/ch/peers/a/settings", ``, 200, `"sources": [
    "tag site=lobby",
    "peer"
  ]`},
		{"GET", "/api/channels/ch/peers/nobody/settings", ``, 404, "no device"},
	} {
		status, body := do(tc.method, tc.path, tc.body)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s %.60s: HTTP %d %s; want %d with %q", tc.method, tc.path, tc.body, status, body, tc.status, tc.want)
		}
	}
	if ev := r.eventsOf(EventChanged); len(ev) != 2 || !strings.Contains(ev[1].Detail, "by otto") {
		t.Fatalf("events %+v", ev)
	}
	// The device's view: effective settings, and the applied version once
	// the registry has it.
	p := r.reg.peers["a"]
	p.SettingsVersion = 2
	r.reg.peers["a"] = p
	_, body := do("GET", "/api/channels/ch/peers/a/settings", "")
	for _, want := range []string{`"version": 2`, `"idle_text": "Welcome"`, `"log_level": "debug"`, `"applied_version": 2`, `"current": true`, `"online": true`, `"listens": true`} {
		if !strings.Contains(body, want) {
			t.Errorf("peer view lacks %s:\n%s", want, body)
		}
	}
	if status, body := do("DELETE", base+"/tags/site/lobby", ""); status != 200 || !strings.Contains(body, `"version": 3`) {
		t.Fatalf("delete: %d %s", status, body)
	}
}

// A device is believed only about what it was asked (issue 36): an ack
// of a version never pushed to that device is refused (an error naming
// the version) and records nothing; the resend of a version the
// registry has for it already is not news; an ack of a version pushed is
// believed.
func TestReportOnlyWhatWasSent(t *testing.T) {
	r := newRig(t, t.TempDir(), Options{})
	r.device("a", true, true, nil)
	r.device("b", true, false, nil) // did not list settings: never pushed
	put(t, r, Selector{Key: "site", Value: "lobby"}, link.Settings{IdleText: str("Hi")})
	for _, c := range []struct {
		peer string
		ack  link.SettingsAck
	}{
		{"b", link.SettingsAck{Version: 1, Error: "forged"}},
		{"b", link.SettingsAck{Version: 1}},
		{"a", link.SettingsAck{Version: 2, Error: "a version to come"}},
		{"a", link.SettingsAck{Version: 99}},
		{"nobody", link.SettingsAck{Version: 1, Error: "x"}},
	} {
		believed, err := r.Report("ch", c.peer, &c.ack)
		if want := fmt.Sprintf("settings version %d was not sent to this device", c.ack.Version); believed || err == nil || err.Error() != want {
			t.Fatalf("Report(%s, %+v) = %v, %v; want refused with %q", c.peer, c.ack, believed, err, want)
		}
	}
	for i := range 1000 { // a flood of refusals writes nothing
		_, _ = r.Report("ch", "a", &link.SettingsAck{Version: int64(i + 2), Error: "flood"})
	}
	if ev := append(r.eventsOf(EventRefused), r.eventsOf(EventApplied)...); len(ev) != 0 {
		t.Fatalf("events of acks never asked for: %+v", ev)
	}
	if believed, err := r.Report("ch", "a", &link.SettingsAck{Version: 1, Error: "the display cannot"}); !believed || err != nil {
		t.Fatalf("the ack of the version pushed: %v, %v", believed, err)
	}
	if ev := r.eventsOf(EventRefused); len(ev) != 1 || ev[0].Detail != "version 1: the display cannot" {
		t.Fatalf("refused events %+v", ev)
	}
	if believed, err := r.Report("ch", "a", &link.SettingsAck{Version: 1, Error: "the display cannot"}); believed || err != nil {
		t.Fatalf("the same ack again: %v, %v; want not news", believed, err)
	}

	// A server that started again pushed nothing yet: a device's resend
	// of the version its connect said (the registry has it) is not news;
	// any other is refused.
	again := newRig(t, t.TempDir(), Options{})
	again.device("a", true, true, nil)
	p := again.reg.peers["a"]
	p.SettingsVersion = 1
	again.reg.peers["a"] = p
	if believed, err := again.Report("ch", "a", &link.SettingsAck{Version: 1}); believed || err != nil {
		t.Fatalf("the resend of the applied version: %v, %v; want not news", believed, err)
	}
	if _, err := again.Report("ch", "a", &link.SettingsAck{Version: 1, Error: "x"}); err == nil {
		t.Fatal("a refusal of a version never pushed here taken")
	}
}

// A device's refusals pass the gate: a burst of events, then none.
func TestReportRefusalsThrottled(t *testing.T) {
	var logged syncbuf.Buffer
	gate := throttle.New(slog.New(slog.NewTextHandler(&logged, nil)), throttle.Options{Burst: 2, Every: time.Hour})
	defer gate.Close()
	r := newRig(t, t.TempDir(), Options{Outside: gate})
	r.device("a", true, true, nil)
	for i := range 4 { // versions 1-4 pushed
		put(t, r, Selector{Key: "site", Value: "lobby"}, link.Settings{IdleSeconds: num(i + 1)})
		if believed, err := r.Report("ch", "a", &link.SettingsAck{Version: int64(i + 1), Error: "no " + strings.Repeat("x", 1000)}); !believed || err != nil {
			t.Fatalf("ack %d: %v, %v", i+1, believed, err)
		}
	}
	ev := r.eventsOf(EventRefused)
	if len(ev) != 2 {
		t.Fatalf("%d settings_refused events for 4 refusals, want the gate's burst of 2", len(ev))
	}
	if n := len(ev[0].Detail); n > throttle.DefaultMaxField {
		t.Fatalf("an event's detail of %d bytes, want it cut to %d", n, throttle.DefaultMaxField)
	}
}

// A peer's document is put only for a peer_id a device could connect
// with (the channel's rule): 400 naming the problem.
func TestPutRefusesImpossiblePeerID(t *testing.T) {
	r := newRig(t, t.TempDir(), Options{})
	mux := http.NewServeMux()
	r.Routes(mux)
	for _, path := range []string{"..%2f..%2fx", "a%20b!", "-a", strings.Repeat("p", 129), "%C3%A9t%C3%A9"} {
		req := httptest.NewRequest("PUT", "/api/channels/ch/settings/peers/"+path, strings.NewReader(`{"log_level": "debug"}`))
		req = httpapi.WithOperator(req, httpapi.Operator{Name: "otto"})
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		if w.Code != 400 || !strings.Contains(w.Body.String(), "peer_id") || (len(path) < 129 && !strings.Contains(w.Body.String(), "is not a peer_id a device could connect with")) {
			t.Errorf("PUT peers/%.40s: HTTP %d %s; want 400 naming the peer_id", path, w.Code, w.Body)
		}
	}
	if _, err := r.Put("ch", Selector{PeerID: "../x"}, link.Settings{LogLevel: "debug"}, "op"); err == nil || !strings.HasPrefix(err.Error(), `peer_id: "../x" is not a peer_id`) {
		t.Fatalf("Put ../x: %v", err)
	}
	if len(r.Channel("ch").Peers) != 0 {
		t.Fatalf("documents kept: %+v", r.Channel("ch").Peers)
	}
	put(t, r, Selector{PeerID: "kiosk-1.lobby@site+2_x"}, link.Settings{LogLevel: "debug"})
}
