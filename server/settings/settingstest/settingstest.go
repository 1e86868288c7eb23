// Package settingstest is the contract every settings.Storage passes
// under the settings pushed to devices (settings.Store): the documents
// per tag and per peer, the channel's version, a device's effective
// settings, the push of every change and to a device that connects with
// another version, acks as events and tags into the registry once
// acked, the API's answers and bounds, and what a store keeps when it is
// opened again; on a store other nodes share, a change made through one
// handle reaching the devices connected to another (once), and two
// handles' changes at once both kept with distinct versions. Package
// settings runs it on LocalStorage, package cluster on its JetStream KV;
// what only one store does (a file that cannot be written, a record
// written by hand) each tests on its own.
package settingstest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/syncbuf"
	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/registry"
	"termlink/server/settings"
	"termlink/server/throttle"
)

// NewStore returns a new, empty store and a way to open the settings on
// it: each call of open is another handle on the same store (the
// workspace opened again once the previous handle is closed, or another
// node). The contract closes each handle it opens.
type NewStore func(t *testing.T) (open func(opt settings.Options, deps settings.Deps) *settings.Store)

// Run runs the contract.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Effective", func(t *testing.T) { effective(t, newStore(t)) })
	t.Run("ChangePushedAndKept", func(t *testing.T) { changePushedAndKept(t, newStore(t)) })
	t.Run("DeviceConnected", func(t *testing.T) { deviceConnected(t, newStore(t)) })
	t.Run("Report", func(t *testing.T) { report(t, newStore(t)) })
	t.Run("Bounds", func(t *testing.T) { bounds(t, newStore(t)) })
	t.Run("API", func(t *testing.T) { api(t, newStore(t)) })
	t.Run("ReportOnlyWhatWasSent", func(t *testing.T) { reportOnlyWhatWasSent(t, newStore) })
	t.Run("ReportRefusalsThrottled", func(t *testing.T) { reportRefusalsThrottled(t, newStore(t)) })
	t.Run("RefusesImpossiblePeerID", func(t *testing.T) { refusesImpossiblePeerID(t, newStore(t)) })
	t.Run("Nodes", func(t *testing.T) { nodes(t, newStore(t)) })
}

// Registry is the device registry as the store reads it (one channel);
// handles of one store may share it, as a cluster's nodes share theirs.
type Registry struct {
	mu    sync.Mutex
	peers map[string]registry.Peer
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{peers: map[string]registry.Peer{}} }

func (r *Registry) Get(_, peer string) (registry.Peer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.peers[peer]
	return p, ok
}

func (r *Registry) List(_ string, f registry.Filter) []registry.Peer {
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

func (r *Registry) SetTags(_, peer string, tags map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.peers[peer]
	if ok {
		p.Tags = tags
		r.peers[peer] = p
	}
	return ok
}

func (r *Registry) SetSettings(_, peer string, version int64, errText string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.peers[peer]
	if ok {
		p.SettingsVersion, p.SettingsError = version, errText
		r.peers[peer] = p
	}
	return ok
}

// Device puts a device in the registry.
func (r *Registry) Device(id string, online, capable bool, tags map[string]string) {
	p := registry.Peer{PeerID: id, Online: online, Tags: tags}
	if capable {
		p.Capabilities = []string{link.CapSettings}
	}
	r.mu.Lock()
	r.peers[id] = p
	r.mu.Unlock()
}

func (r *Registry) setApplied(id string, v int64) {
	r.mu.Lock()
	p := r.peers[id]
	p.SettingsVersion = v
	r.peers[id] = p
	r.mu.Unlock()
}

// Rig is one handle with a registry, the devices connected to it (all
// online ones, unless Only is called), the frames it sent and its events.
type Rig struct {
	*settings.Store
	Reg *Registry

	mu     sync.Mutex
	only   map[string]bool // nil: every online device is connected here
	sent   map[string][]link.Settings
	events []events.Event
}

// NewRig opens a handle (closed when the test ends) on reg.
func NewRig(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store, reg *Registry, opt settings.Options) *Rig {
	t.Helper()
	r := &Rig{Reg: reg, sent: map[string][]link.Settings{}}
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(&syncbuf.Buffer{}, nil))
	}
	r.Store = open(opt, settings.Deps{Registry: reg,
		Send: func(_, peer string, f link.Frame) bool {
			p, _ := reg.Get("", peer)
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.only != nil { // the devices connected here, whatever the registry says yet
				if !r.only[peer] {
					return false
				}
			} else if !p.Online || !slices.Contains(p.Capabilities, link.CapSettings) {
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
	t.Cleanup(func() { _ = r.Store.Close() })
	return r
}

// Only says which devices are connected to this handle (the others are
// online elsewhere), whether or not the registry lists them yet.
func (r *Rig) Only(peers ...string) {
	r.mu.Lock()
	r.only = map[string]bool{}
	for _, p := range peers {
		r.only[p] = true
	}
	r.mu.Unlock()
}

// Frames are the settings sent to peer, in order.
func (r *Rig) Frames(peer string) []link.Settings {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent[peer])
}

// EventsOf are the events named name, in order.
func (r *Rig) EventsOf(name string) []events.Event {
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

func newRig(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store, opt settings.Options) *Rig {
	t.Helper()
	return NewRig(t, open, NewRegistry(), opt)
}

func str(s string) *string { return &s }
func num(n int) *int       { return &n }

func put(t *testing.T, r *Rig, sel settings.Selector, f link.Settings) settings.Change {
	t.Helper()
	c, err := r.Put(context.Background(), "ch", sel, f, "op")
	if err != nil {
		t.Fatalf("Put %s: %v", sel, err)
	}
	return c
}

// A device's settings: its tags' documents in key=value order (a later
// one wins per field), then its peer document; a peer document's tags
// are the tags matched. A field nobody sets is left out.
func effective(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store) {
	r := newRig(t, open, settings.Options{})
	put(t, r, settings.Selector{Key: "site", Value: "lobby"}, link.Settings{IdleText: str("Lobby"), IdleSeconds: num(30), LogLevel: "info"})
	put(t, r, settings.Selector{Key: "floor", Value: "2"}, link.Settings{IdleText: str("Floor 2"), NoticeSeconds: num(20)})
	put(t, r, settings.Selector{Key: "site", Value: "cafe"}, link.Settings{IdleText: str("Cafe")})
	put(t, r, settings.Selector{PeerID: "p1"}, link.Settings{LogLevel: "debug"})
	put(t, r, settings.Selector{PeerID: "p2"}, link.Settings{Tags: map[string]string{"site": "cafe"}, BacklightOffAfter: num(60)})

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
func changePushedAndKept(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store) {
	r := newRig(t, open, settings.Options{})
	r.Reg.Device("a", true, true, map[string]string{"site": "lobby"})
	r.Reg.Device("b", true, true, nil)
	r.Reg.Device("off", false, true, map[string]string{"site": "lobby"})
	r.Reg.Device("old", true, false, map[string]string{"site": "lobby"})

	c := put(t, r, settings.Selector{Key: "site", Value: "lobby"}, link.Settings{IdleText: str("Welcome")})
	if c.Version != 1 || c.Pushed != 2 {
		t.Fatalf("put: %+v, want version 1 pushed to 2", c)
	}
	if f := r.Frames("a"); len(f) != 1 || f[0].Version != 1 || *f[0].IdleText != "Welcome" {
		t.Fatalf("a got %+v", f)
	}
	if f := r.Frames("b"); len(f) != 1 || f[0].Version != 1 || f[0].IdleText != nil {
		t.Fatalf("b (no tag) got %+v", f)
	}
	if len(r.Frames("off")) != 0 || len(r.Frames("old")) != 0 {
		t.Fatal("an offline device, or one without the capability, was sent settings")
	}
	ctx := context.Background()
	c, err := r.Delete(ctx, "ch", settings.Selector{Key: "site", Value: "lobby"}, "op")
	if err != nil || c.Version != 2 {
		t.Fatalf("delete: %+v %v", c, err)
	}
	if f := r.Frames("a"); len(f) != 2 || f[1].Version != 2 || f[1].IdleText != nil {
		t.Fatalf("after the delete a got %+v", f)
	}
	if _, err := r.Delete(ctx, "ch", settings.Selector{Key: "site", Value: "lobby"}, "op"); !errors.Is(err, settings.ErrNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
	put(t, r, settings.Selector{PeerID: "a"}, link.Settings{LogLevel: "warn", Tags: map[string]string{"site": "cafe"}})
	if ev := r.EventsOf(settings.EventChanged); len(ev) != 3 || !strings.Contains(ev[0].Detail, `tag site=lobby: set idle_text="Welcome" by op (version 1, pushed to 2 online)`) ||
		!strings.Contains(ev[1].Detail, "deleted") || ev[2].PeerID != "a" {
		t.Fatalf("events %+v", ev)
	}
	// Each device was sent each version once.
	if f := r.Frames("a"); len(f) != 3 || f[2].Version != 3 {
		t.Fatalf("a got %+v, want versions 1, 2, 3 once each", f)
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := newRig(t, open, settings.Options{})
	snap := r2.Channel("ch")
	if snap.Version != 3 || len(snap.Tags) != 0 || snap.Peers["a"] == nil || snap.Peers["a"].LogLevel != "warn" || snap.Peers["a"].UpdatedBy != "op" {
		t.Fatalf("reopened: %+v", snap)
	}
	c = put(t, r2, settings.Selector{PeerID: "b"}, link.Settings{LogLevel: "error"})
	if c.Version != 4 {
		t.Fatalf("the version after a reopen went to %d, want 4", c.Version)
	}
}

// A device that connects with another version than the channel's gets
// its settings; one that has it, or did not list "settings", does not;
// nothing is sent before the first document.
func deviceConnected(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store) {
	r := newRig(t, open, settings.Options{})
	r.Reg.Device("a", true, true, nil)
	connect := func(v int64, caps ...string) {
		r.DeviceConnected("ch", &link.Connect{PeerID: "a", SettingsVersion: v, Capabilities: caps, Tags: map[string]string{"site": "lobby"}})
	}
	connect(0, link.CapSettings)
	if len(r.Frames("a")) != 0 {
		t.Fatal("settings sent before there are any")
	}
	r.Reg.Device("a", false, true, nil) // offline during the change
	put(t, r, settings.Selector{Key: "site", Value: "lobby"}, link.Settings{IdleText: str("Hi")})
	r.Reg.Device("a", true, true, nil)
	connect(1, link.CapSettings)
	connect(0)
	if len(r.Frames("a")) != 0 {
		t.Fatal("sent to a device that has the version, or did not list settings")
	}
	connect(0, link.CapSettings)
	if f := r.Frames("a"); len(f) != 1 || f[0].Version != 1 || *f[0].IdleText != "Hi" {
		t.Fatalf("connect with version 0: sent %+v", f)
	}
	connect(7, link.CapSettings) // a version this server never gave (its settings were lost): brought back
	if f := r.Frames("a"); len(f) != 2 || f[1].Version != 1 {
		t.Fatalf("connect with version 7: sent %+v", f)
	}
}

// An ack is an event once (the device resends it on every connect); a
// refusal carries the device's reason; an ack of settings that set the
// device's tags puts them in the registry.
func report(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store) {
	r := newRig(t, open, settings.Options{})
	r.Reg.Device("a", true, true, map[string]string{"site": "lobby"})
	put(t, r, settings.Selector{PeerID: "a"}, link.Settings{Tags: map[string]string{"site": "cafe", "floor": "2"}})
	_, _ = r.Report("ch", "a", &link.SettingsAck{Version: 1, Error: "idle_text: the display cannot show it"})
	if p, _ := r.Reg.Get("", "a"); p.Tags["site"] != "lobby" {
		t.Fatalf("tags changed by a refusal: %v", p.Tags)
	}
	// What the store believed is kept in the registry (its rule).
	if p, _ := r.Reg.Get("", "a"); p.SettingsVersion != 1 || p.SettingsError != "idle_text: the display cannot show it" {
		t.Fatalf("the registry after the refusal: settings %d %q", p.SettingsVersion, p.SettingsError)
	}
	_, _ = r.Report("ch", "a", &link.SettingsAck{Version: 1})
	_, _ = r.Report("ch", "a", &link.SettingsAck{Version: 1}) // resent on a connect
	if _, err := r.Report("ch", "a", &link.UpdateStatus{Version: "v1", State: link.UpdateInstalled}); err == nil {
		t.Error("an update_status taken by the settings")
	}
	if ev := r.EventsOf(settings.EventRefused); len(ev) != 1 || ev[0].Detail != "version 1: idle_text: the display cannot show it" || ev[0].PeerID != "a" {
		t.Fatalf("refused events %+v", ev)
	}
	if ev := r.EventsOf(settings.EventApplied); len(ev) != 1 || ev[0].Detail != "version 1" {
		t.Fatalf("applied events %+v", ev)
	}
	if p, _ := r.Reg.Get("", "a"); !reflect.DeepEqual(p.Tags, map[string]string{"site": "cafe", "floor": "2"}) {
		t.Fatalf("registry tags after the ack: %v", p.Tags)
	}
	// The ack of an older version (a newer one is on its way) leaves the tags.
	put(t, r, settings.Selector{PeerID: "a"}, link.Settings{Tags: map[string]string{"site": "roof"}})
	_, _ = r.Report("ch", "a", &link.SettingsAck{Version: 1})
	if p, _ := r.Reg.Get("", "a"); p.Tags["site"] != "cafe" {
		t.Fatalf("a stale ack set tags %v", p.Tags)
	}
}

// Past MaxDocuments a new document is refused (a change of one there
// is still taken), as is a document past MaxDocumentBytes; a refused
// change leaves the documents and the version as they were.
func bounds(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store) {
	r := newRig(t, open, settings.Options{MaxDocuments: 2})
	ctx := context.Background()
	put(t, r, settings.Selector{PeerID: "a"}, link.Settings{LogLevel: "info"})
	put(t, r, settings.Selector{Key: "k", Value: "v"}, link.Settings{LogLevel: "info"})
	if _, err := r.Put(ctx, "ch", settings.Selector{PeerID: "b"}, link.Settings{LogLevel: "info"}, "op"); !errors.Is(err, settings.ErrFull) || !strings.Contains(err.Error(), "at most 2") {
		t.Fatalf("a third document: %v", err)
	}
	put(t, r, settings.Selector{PeerID: "a"}, link.Settings{LogLevel: "warn"})
	long := strings.Repeat("x", settings.MaxDocumentBytes)
	if _, err := r.Put(ctx, "ch", settings.Selector{PeerID: "a"}, link.Settings{Tags: map[string]string{"k": "v"}, IdleText: &long}, "op"); err == nil {
		t.Fatal("a document past its bounds taken")
	}
	if _, err := r.Delete(ctx, "ch", settings.Selector{PeerID: "zz"}, "op"); !errors.Is(err, settings.ErrNotFound) {
		t.Fatalf("delete of no document: %v", err)
	}
	if snap := r.Channel("ch"); snap.Version != 3 || snap.Peers["a"].LogLevel != "warn" || len(snap.Tags)+len(snap.Peers) != 2 {
		t.Fatalf("after refused changes: version %d, a %+v", snap.Version, snap.Peers["a"])
	}
}

// The API: writes, reads, a device's view, and bad input answered 400
// naming the field.
func api(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store) {
	r := newRig(t, open, settings.Options{})
	r.Reg.Device("a", true, true, map[string]string{"site": "lobby"})
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
		{"PUT", base + "/tags/site/lobby", `{"idle_text": "` + strings.Repeat("x", settings.MaxDocumentBytes) + `"}`, 413, "longer than 4096 bytes"},
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
	if ev := r.EventsOf(settings.EventChanged); len(ev) != 2 || !strings.Contains(ev[1].Detail, "by otto") {
		t.Fatalf("events %+v", ev)
	}
	// The device's view: effective settings, and the applied version once
	// the registry has it.
	r.Reg.setApplied("a", 2)
	_, body := do("GET", "/api/channels/ch/peers/a/settings", "")
	for _, want := range []string{`"version": 2`, `"idle_text": "Welcome"`, `"log_level": "debug"`, `"applied_version": 2`, `"current": true`, `"online": true`, `"listens": true`} {
		if !strings.Contains(body, want) {
			t.Errorf("peer view lacks %s:\n%s", want, body)
		}
	}
	if status, body := do("DELETE", base+"/tags/site/lobby", ""); status != 200 || !strings.Contains(body, `"version": 3`) {
		t.Fatalf("delete: %d %s", status, body)
	}
	if status, body := do("GET", base, ""); status != 200 || !strings.Contains(body, `"version": 3`) || !strings.Contains(body, `"documents": 1`) {
		t.Fatalf("list after the delete: %d %s", status, body)
	}
}

// A device is believed only about what it was asked (issue 36): an ack
// of a version never pushed to that device is refused (an error naming
// the version) and records nothing; the resend of a version the
// registry has for it already is not news; an ack of a version pushed is
// believed.
func reportOnlyWhatWasSent(t *testing.T, newStore NewStore) {
	r := newRig(t, newStore(t), settings.Options{})
	r.Reg.Device("a", true, true, nil)
	r.Reg.Device("b", true, false, nil) // did not list settings: never pushed
	put(t, r, settings.Selector{Key: "site", Value: "lobby"}, link.Settings{IdleText: str("Hi")})
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
	if ev := append(r.EventsOf(settings.EventRefused), r.EventsOf(settings.EventApplied)...); len(ev) != 0 {
		t.Fatalf("events of acks never asked for: %+v", ev)
	}
	if believed, err := r.Report("ch", "a", &link.SettingsAck{Version: 1, Error: "the display cannot"}); !believed || err != nil {
		t.Fatalf("the ack of the version pushed: %v, %v", believed, err)
	}
	if ev := r.EventsOf(settings.EventRefused); len(ev) != 1 || ev[0].Detail != "version 1: the display cannot" {
		t.Fatalf("refused events %+v", ev)
	}
	if believed, err := r.Report("ch", "a", &link.SettingsAck{Version: 1, Error: "the display cannot"}); believed || err != nil {
		t.Fatalf("the same ack again: %v, %v; want not news", believed, err)
	}

	// A server that started again pushed nothing yet: a device's resend
	// of the version its connect said (the registry has it) is not news;
	// any other is refused.
	again := newRig(t, newStore(t), settings.Options{})
	again.Reg.Device("a", true, true, nil)
	again.Reg.setApplied("a", 1)
	if believed, err := again.Report("ch", "a", &link.SettingsAck{Version: 1}); believed || err != nil {
		t.Fatalf("the resend of the applied version: %v, %v; want not news", believed, err)
	}
	if _, err := again.Report("ch", "a", &link.SettingsAck{Version: 1, Error: "x"}); err == nil {
		t.Fatal("a refusal of a version never pushed here taken")
	}
}

// A device's refusals pass the gate: a burst of events, then none.
func reportRefusalsThrottled(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store) {
	var logged syncbuf.Buffer
	gate := throttle.New(slog.New(slog.NewTextHandler(&logged, nil)), throttle.Options{Burst: 2, Every: time.Hour})
	defer gate.Close()
	r := newRig(t, open, settings.Options{Outside: gate})
	r.Reg.Device("a", true, true, nil)
	for i := range 4 { // versions 1-4 pushed
		put(t, r, settings.Selector{Key: "site", Value: "lobby"}, link.Settings{IdleSeconds: num(i + 1)})
		if believed, err := r.Report("ch", "a", &link.SettingsAck{Version: int64(i + 1), Error: "no " + strings.Repeat("x", 1000)}); !believed || err != nil {
			t.Fatalf("ack %d: %v, %v", i+1, believed, err)
		}
	}
	ev := r.EventsOf(settings.EventRefused)
	if len(ev) != 2 {
		t.Fatalf("%d settings_refused events for 4 refusals, want the gate's burst of 2", len(ev))
	}
	if n := len(ev[0].Detail); n > throttle.DefaultMaxField {
		t.Fatalf("an event's detail of %d bytes, want it cut to %d", n, throttle.DefaultMaxField)
	}
}

// A peer's document is put only for a peer_id a device could connect
// with (the channel's rule): 400 naming the problem.
func refusesImpossiblePeerID(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store) {
	r := newRig(t, open, settings.Options{})
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
	if _, err := r.Put(context.Background(), "ch", settings.Selector{PeerID: "../x"}, link.Settings{LogLevel: "debug"}, "op"); err == nil || !strings.HasPrefix(err.Error(), `peer_id: "../x" is not a peer_id`) {
		t.Fatalf("Put ../x: %v", err)
	}
	if len(r.Channel("ch").Peers) != 0 {
		t.Fatalf("documents kept: %+v", r.Channel("ch").Peers)
	}
	put(t, r, settings.Selector{PeerID: "kiosk-1.lobby@site+2_x"}, link.Settings{LogLevel: "debug"})
}

// On a shared store (other nodes): two handles at once on one registry,
// each with its own connected devices. A change made through one reaches
// the devices connected to the other, through that one, once; changes
// made through both at once are all kept, each with its own version;
// the other's device's ack is taken by the handle that pushed it.
func nodes(t *testing.T, open func(settings.Options, settings.Deps) *settings.Store) {
	reg := NewRegistry()
	a := NewRig(t, open, reg, settings.Options{})
	if !a.Shared() {
		t.Skip("the store is not shared: one handle at a time")
	}
	b := NewRig(t, open, reg, settings.Options{})
	reg.Device("ka", true, true, map[string]string{"site": "lobby"})
	reg.Device("kb", true, true, map[string]string{"site": "lobby"})
	a.Only("ka")
	b.Only("kb", "kc")
	// kc has just connected to b: the registry (in a cluster, every
	// node's view, written behind) does not list it yet.
	b.DeviceConnected("ch", &link.Connect{PeerID: "kc", Capabilities: []string{link.CapSettings}, Tags: map[string]string{"site": "lobby"}})

	c := put(t, a, settings.Selector{Key: "site", Value: "lobby"}, link.Settings{IdleText: str("Welcome")})
	if c.Version != 1 || c.Pushed != 1 {
		t.Fatalf("put on a: %+v, want version 1 pushed to its one device", c)
	}
	testwait.Until(t, "kb and kc sent version 1 by b", func() bool { return len(b.Frames("kb")) == 1 && len(b.Frames("kc")) == 1 })
	for _, p := range []string{"kb", "kc"} {
		if f := b.Frames(p)[0]; f.Version != 1 || *f.IdleText != "Welcome" {
			t.Fatalf("%s got %+v", p, f)
		}
	}
	if len(a.Frames("kb")) != 0 || len(b.Frames("ka")) != 0 {
		t.Fatal("a device was sent settings by a handle it is not connected to")
	}
	if believed, err := b.Report("ch", "kb", &link.SettingsAck{Version: 1}); !believed || err != nil {
		t.Fatalf("kb's ack on b: %v, %v", believed, err)
	}
	if ev := b.EventsOf(settings.EventApplied); len(ev) != 1 || ev[0].PeerID != "kb" {
		t.Fatalf("b's applied events %+v", ev)
	}
	if ev := b.EventsOf(settings.EventChanged); len(ev) != 0 {
		t.Fatalf("b recorded a's change as its own: %+v", ev)
	}

	// Changes through both at once: every one kept, versions distinct.
	const each = 5
	var wg sync.WaitGroup
	versions := make(chan int64, 2*each)
	for i, r := range []*Rig{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				c, err := r.Put(context.Background(), "ch", settings.Selector{PeerID: fmt.Sprintf("p%d-%d", i, j)}, link.Settings{IdleSeconds: num(j + 1)}, "op")
				if err != nil {
					t.Errorf("put on handle %d: %v", i, err)
					return
				}
				versions <- c.Version
			}
		}()
	}
	wg.Wait()
	close(versions)
	var got []int64
	for v := range versions {
		got = append(got, v)
	}
	slices.Sort(got)
	if want := []int64{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; !slices.Equal(got, want) {
		t.Fatalf("versions of the changes at once %v, want %v (each its own)", got, want)
	}
	for _, r := range []*Rig{a, b} {
		testwait.Until(t, "every handle to hold the 11 documents at version 11", func() bool {
			s := r.Channel("ch")
			return s.Version == 11 && len(s.Peers) == 2*each && len(s.Tags) == 1
		})
	}
	// Each device is sent the versions in order, each once, the last one
	// the channel's.
	for _, x := range []struct {
		r    *Rig
		peer string
	}{{a, "ka"}, {b, "kb"}} {
		testwait.Until(t, x.peer+" sent version 11", func() bool {
			f := x.r.Frames(x.peer)
			return len(f) > 0 && f[len(f)-1].Version == 11
		})
		f := x.r.Frames(x.peer)
		for i := 1; i < len(f); i++ {
			if f[i].Version <= f[i-1].Version {
				t.Fatalf("%s was sent versions out of order or twice: %v", x.peer, versionsOf(f))
			}
		}
	}
}

func versionsOf(f []link.Settings) []int64 {
	out := make([]int64, len(f))
	for i, s := range f {
		out[i] = s.Version
	}
	return out
}
