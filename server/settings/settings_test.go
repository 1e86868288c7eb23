package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"termlink/internal/syncbuf"
	"termlink/link"
	"termlink/server/events"
	"termlink/server/registry"
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

func (r *fakeRegistry) SetSettings(_, peer string, version int64, errText string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.peers[peer]
	if ok {
		p.SettingsVersion, p.SettingsError = version, errText
		r.peers[peer] = p
	}
	return ok
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
	c, err := r.Put(context.Background(), "ch", sel, f, "op")
	if err != nil {
		t.Fatalf("Put %s: %v", sel, err)
	}
	return c
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

// The local store: past MaxDocuments a new document is refused (a
// change of one there is still taken); a write that fails leaves the documents as they were.
func TestBoundsAndWriteFailure(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := newRig(t, dir, Options{MaxDocuments: 2})
	put(t, r, Selector{PeerID: "a"}, link.Settings{LogLevel: "info"})
	put(t, r, Selector{Key: "k", Value: "v"}, link.Settings{LogLevel: "info"})
	if _, err := r.Put(ctx, "ch", Selector{PeerID: "b"}, link.Settings{LogLevel: "info"}, "op"); !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "at most 2") {
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
	if _, err := r.Put(ctx, "ch", Selector{PeerID: "a"}, link.Settings{LogLevel: "error"}, "op"); err == nil {
		t.Fatal("a change that could not be written was taken")
	}
	if _, err := r.Delete(ctx, "ch", Selector{PeerID: "a"}, "op"); err == nil {
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
		l, err := OpenLocal(dir, true)
		if err != nil {
			t.Fatal(err)
		}
		for id, c := range parsed.Channels {
			rec, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parseChannel(id, rec); err != nil {
				t.Fatalf("channel %q as a record does not parse: %v\n%s", id, err, rec)
			}
			if _, err := l.Put(context.Background(), id, rec, 0); err != nil {
				t.Fatal(err)
			}
		}
		if len(parsed.Channels) == 0 {
			return // written only once there is a channel
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

// A channel's record (what a shared store holds) is parsed as strictly
// as the file's channels are, each error naming where.
func TestParseChannel(t *testing.T) {
	good := `{"version": 2, "tags": {"site=lobby": {"idle_text": "Hi", "version": 2, "updated_at": "2026-01-01T00:00:00Z"}}}`
	c, err := parseChannel("ch", []byte(good))
	if err != nil || c.Version != 2 || *c.Tags["site=lobby"].IdleText != "Hi" || c.Peers == nil {
		t.Fatalf("parsed %+v, %v", c, err)
	}
	for _, tc := range []struct{ rec, want string }{
		{``, "channels.ch: the record is empty"},
		{`[]`, "channels.ch: not a channel's record"},
		{`null`, "channels.ch: not a channel's record"},
		{`{"version": 1} {}`, "channels.ch"},
		{`{"version": 1, "version": 2}`, `key "version" twice`},
		{`{"Version": 1}`, `channels.ch: unknown field "Version"`},
		{`{"version": -1}`, "channels.ch.version: negative"},
		{`{"version": 1, "tags": {"site=x": {"idle_text": "a", "version": 2}}}`, "channels.ch.tags.site=x.version: 2, want 1 to the channel's 1"},
		{`{"version": 1, "peers": {"p": {"Idle_Text": "a", "version": 1}}}`, `channels.ch.peers.p: unknown field "Idle_Text"`},
		{`{"version": 1, "peers": {"p": {"idle_seconds": -4, "version": 1}}}`, "channels.ch.peers.p.idle_seconds: must not be negative"},
		{"{\"version\": 1, \"peers\": {\"p\": {\"idle_text\": \"\xff\", \"version\": 1}}}", "not valid UTF-8"},
	} {
		if _, err := parseChannel("ch", []byte(tc.rec)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.rec, err, tc.want)
		}
	}
}
