package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/settings"
)

// settingsDevice is a device on a raw WebSocket that lists "settings"
// and acks every settings frame it is sent; its reader is its only
// writer.
type settingsDevice struct {
	c    *client
	mu   sync.Mutex
	got  []link.Settings
	done chan struct{}
}

func dialSettingsDevice(t *testing.T, ts *testServer, peer string) *settingsDevice {
	t.Helper()
	c := dial(t, ts.ws, nil)
	c.connect(peer, link.CapText, link.CapSettings)
	_ = c.ws.SetReadDeadline(time.Time{})
	d := &settingsDevice{c: c, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for {
			_, data, err := c.ws.ReadMessage()
			if err != nil {
				return
			}
			f, _ := link.Decode(data)
			s, ok := f.(*link.Settings)
			if !ok {
				continue
			}
			d.mu.Lock()
			d.got = append(d.got, *s)
			d.mu.Unlock()
			_ = c.ws.SetWriteDeadline(time.Now().Add(time.Minute))
			if err := c.ws.WriteMessage(1, link.MustEncode(&link.SettingsAck{Version: s.Version})); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { c.ws.Close(); <-d.done })
	return d
}

func (d *settingsDevice) frames() []link.Settings {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got)
}

// settingsCall makes an operator's settings request on ts.
func settingsCall(t *testing.T, ts *testServer, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.http.URL+"/api/channels/terminal-dev/"+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	req.Header.Set("Authorization", "Bearer "+operatorSecret)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Issue 39 item 3: settings documents are cluster state. Two edges on
// one JetStream: a document PUT through edge-a reaches a device
// connected to edge-b (edge-b pushes it, through its own connection),
// whose settings_ack edge-b records (the registry's applied version, an
// event); PUTs through both edges at once are both kept, each with its
// own version, and the device is brought to the last one.
func TestClusterSettingsFromAnyNode(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	node := func(name string) *testServer {
		cfg := config.Default()
		cfg.Workspace = t.TempDir()
		withAdmin(t)(cfg)
		cfg.Cluster = config.Cluster{NATS: []string{url}, Role: config.RoleEdge, Name: name, Partitions: 1, Replicas: 1,
			AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
		return serve(t, cfg, Options{})
	}
	a, b := node("edge-a"), node("edge-b")
	kb := dialSettingsDevice(t, b, "kb")
	kb.c.send(&link.Ping{}) // the connect's tags and version: none; nothing is pushed before a document

	code, body := settingsCall(t, a, "PUT", "settings/tags/site/lobby", `{"idle_text": "Welcome"}`)
	if code != 200 || !strings.Contains(body, `"version": 1`) {
		t.Fatalf("PUT on edge-a: %d %s", code, body)
	}
	testwait.Until(t, "kb (on edge-b) sent version 1", func() bool { return len(kb.frames()) > 0 })
	if f := kb.frames()[0]; f.Version != 1 {
		t.Fatalf("kb got %+v, want version 1", f)
	}
	// kb has no tag site=lobby: its settings are the version alone. A
	// peer document for it, on edge-a, sets its tags and idle text.
	if code, body := settingsCall(t, a, "PUT", "settings/peers/kb", `{"tags": {"site": "lobby"}, "log_level": "debug"}`); code != 200 || !strings.Contains(body, `"version": 2`) {
		t.Fatalf("PUT peers/kb on edge-a: %d %s", code, body)
	}
	testwait.Until(t, "kb sent version 2 with the lobby's idle text", func() bool {
		f := kb.frames()
		return len(f) == 2 && f[1].Version == 2 && f[1].IdleText != nil && *f[1].IdleText == "Welcome" && f[1].LogLevel == "debug"
	})
	// Its ack, taken by edge-b: the registry's applied version and its
	// tags, and an event on edge-b's log.
	testwait.Until(t, "edge-b records kb's ack of version 2", func() bool {
		p, ok := b.fleet.reg.Get("terminal-dev", "kb")
		return ok && p.SettingsVersion == 2 && p.Tags["site"] == "lobby"
	})
	applied := func(ts *testServer) []string {
		var out []string
		for _, e := range ts.rt.Channels["terminal-dev"].Events.Recent(100) {
			if e.Event == settings.EventApplied && e.PeerID == "kb" {
				out = append(out, e.Detail)
			}
		}
		return out
	}
	testwait.Until(t, "edge-b's settings_applied events for kb", func() bool { return slices.Contains(applied(b), "version 2") })
	// Edge-a answers for it too: the cluster's registry and documents.
	testwait.Until(t, "edge-a shows kb current at version 2", func() bool {
		code, body := settingsCall(t, a, "GET", "peers/kb/settings", "")
		return code == 200 && strings.Contains(body, `"applied_version": 2`) && strings.Contains(body, `"current": true`)
	})

	// Two PUTs at once, one through each edge: both kept, versions distinct.
	var wg sync.WaitGroup
	versions := make([]int64, 2)
	for i, ts := range []*testServer{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := settingsCall(t, ts, "PUT", fmt.Sprintf("settings/tags/floor/%d", i), `{"idle_seconds": 30}`)
			var c settings.Change
			if code != 200 || json.Unmarshal([]byte(body), &c) != nil {
				t.Errorf("PUT through node %d: %d %s", i, code, body)
				return
			}
			versions[i] = c.Version
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if slices.Sort(versions); versions[0] != 3 || versions[1] != 4 {
		t.Fatalf("the two PUTs at once got versions %v, want 3 and 4", versions)
	}
	for _, ts := range []*testServer{a, b} {
		testwait.Until(t, "each edge lists both documents at version 4", func() bool {
			code, body := settingsCall(t, ts, "GET", "settings", "")
			return code == 200 && strings.Contains(body, `"version": 4`) && strings.Contains(body, `"tag": "floor=0"`) && strings.Contains(body, `"tag": "floor=1"`)
		})
	}
	testwait.Until(t, "kb sent version 4", func() bool {
		f := kb.frames()
		return f[len(f)-1].Version == 4
	})
	f := kb.frames()
	for i := 1; i < len(f); i++ {
		if f[i].Version <= f[i-1].Version {
			t.Fatalf("kb was sent versions out of order or twice: %+v", f)
		}
	}
	testwait.Until(t, "edge-b records kb's ack of version 4", func() bool {
		p, _ := b.fleet.reg.Get("terminal-dev", "kb")
		return p.SettingsVersion == 4
	})
}
