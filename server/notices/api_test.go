package notices

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// tagDirectory knows peers by one tag, site.
type tagDirectory map[string][]string

func (d tagDirectory) PeersWithTags(_ string, tags map[string]string) []string {
	if len(tags) == 0 {
		var all []string
		for _, ps := range d {
			all = append(all, ps...)
		}
		slices.Sort(all)
		return all
	}
	return d[tags["site"]]
}

// The routes take everything of the server from Options: which channels
// exist (404, 409), the peers a broadcast reaches (Directory), the push
// into a live connection (Push, counted as online) and the Changed hook.
func TestRoutesUseTheirOptions(t *testing.T) {
	var mu sync.Mutex
	var pushed, changed []string
	ns, err := Open(t.TempDir(), Options{Sweep: time.Hour,
		Channel:   func(id string) (bool, bool) { return id != "nope", id != "off" },
		Directory: tagDirectory{"lobby": {"k1", "k2"}, "hall": {"k3"}},
		Push: func(ch, p string) bool {
			mu.Lock()
			defer mu.Unlock()
			pushed = append(pushed, ch+"/"+p)
			return p == "k1"
		},
		Changed: func(ch, p string) {
			mu.Lock()
			defer mu.Unlock()
			changed = append(changed, ch+"/"+p)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	mux := http.NewServeMux()
	ns.Routes(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%s %s: HTTP %d, not JSON: %s", method, path, resp.StatusCode, data)
		}
		return resp.StatusCode, out
	}

	for _, tc := range []struct {
		method, path, body string
		code               int
		err                string
	}{
		{"POST", "/api/channels/nope/notices", `{"text":"x"}`, 404, `no channel "nope" is configured`},
		{"GET", "/api/channels/off/peers/k1/notices", "", 409, `channel "off" is disabled: it takes no notices`},
		{"POST", "/api/channels/ch/peers/-k/notices", `{"text":"x"}`, 400, `"-k" is not a peer id`},
		{"POST", "/api/channels/ch/notices", `{"text":"x","tags":{"site":"roof"}}`, 404, `channel "ch" has no known peer with tags site=roof`},
		{"DELETE", "/api/channels/ch/notices/n-none", "", 404, `channel "ch" has no notice "n-none"`},
	} {
		code, out := do(tc.method, tc.path, tc.body)
		if msg, _ := out["error"].(string); code != tc.code || !strings.HasPrefix(msg, tc.err) {
			t.Errorf("%s %s: HTTP %d %v, want %d %q", tc.method, tc.path, code, out, tc.code, tc.err)
		}
	}

	code, out := do("POST", "/api/channels/ch/notices", `{"text":"lobby closes","tags":{"site":"lobby"}}`)
	if code != 201 || out["targets"] != 2.0 || out["online"] != 1.0 {
		t.Fatalf("broadcast: HTTP %d %v", code, out)
	}
	id := out["notice_ids"].([]any)[0].(string)
	mu.Lock()
	if want := []string{"ch/k1", "ch/k2"}; !slices.Equal(pushed, want) || !slices.Equal(changed, want) {
		t.Errorf("pushed %v, changed %v; want %v for both", pushed, changed, want)
	}
	mu.Unlock()
	if code, out := do("DELETE", "/api/channels/ch/peers/k2/notices/"+id, ""); code != 200 || out["withdrawn"] != 1.0 {
		t.Fatalf("withdraw: HTTP %d %v", code, out)
	}
	if n := ns.Count("ch", "k1"); n != 1 {
		t.Fatalf("k1 holds %d open notices, want 1", n)
	}
	if code, out := do("GET", "/api/channels/ch/peers/k2/notices?all=true", ""); code != 200 ||
		len(out["notices"].([]any)) != 1 || out["notices"].([]any)[0].(map[string]any)["state"] != Withdrawn {
		t.Fatalf("k2's notices: HTTP %d %v", code, out)
	}
}

// An agent's push is an info notice from "agent", cut to MaxTextChars.
func TestFromAgent(t *testing.T) {
	ns := openTestNotices(t, t.TempDir(), 10)
	defer ns.Close()
	if err := ns.FromAgent("ch", "p", strings.Repeat("é", MaxTextChars+5)); err != nil {
		t.Fatal(err)
	}
	got := ns.ListPeer("ch", "p", false)
	if len(got) != 1 || got[0].Source != "agent" || got[0].Priority != "info" || got[0].DisplaySeconds != defaultDisplaySeconds {
		t.Fatalf("pending %+v", got)
	}
	if n := utf8.RuneCountInString(got[0].Text); n != MaxTextChars || !strings.HasSuffix(got[0].Text, "…") {
		t.Fatalf("text of %d characters, want %d ending in …", n, MaxTextChars)
	}
}
