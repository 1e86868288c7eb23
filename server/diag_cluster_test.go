package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/link"
	"termlink/server/cluster"
	"termlink/server/config"
	"termlink/server/diag"
)

// diagDevice is a device on a raw WebSocket that lists "diag" and
// answers each diag frame with answer (nil: it never answers); its reader
// is its only writer.
type diagDevice struct {
	c    *client
	got  chan *link.Diag
	done chan struct{}
}

func dialDiagDevice(t *testing.T, ts *testServer, peer string, answer func(*link.Diag) *link.DiagResult) *diagDevice {
	t.Helper()
	c := dial(t, ts.ws, nil)
	c.connect(peer, link.CapText, link.CapDiag)
	_ = c.ws.SetReadDeadline(time.Time{})
	d := &diagDevice{c: c, got: make(chan *link.Diag, 16), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for {
			_, data, err := c.ws.ReadMessage()
			if err != nil {
				return
			}
			f, _ := link.Decode(data)
			q, ok := f.(*link.Diag)
			if !ok {
				continue
			}
			d.got <- q
			if res := answer(q); res != nil {
				_ = c.ws.SetWriteDeadline(time.Now().Add(time.Minute))
				if err := c.ws.WriteMessage(1, link.MustEncode(res)); err != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { c.ws.Close(); <-d.done })
	return d
}

// operatorCall makes an operator's request on ts.
func operatorCall(t *testing.T, ts *testServer, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.http.URL+"/api/channels/terminal-dev/peers/"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+operatorSecret)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// seenOnline waits until ts's registry (the cluster's view) shows peer
// online, or not.
func seenOnline(t *testing.T, ts *testServer, peer string, online bool) {
	t.Helper()
	if !waitUntil(t, "node sees "+peer+" online="+map[bool]string{true: "yes", false: "no"}[online], func() bool {
		p, ok := ts.fleet.reg.Get("terminal-dev", peer)
		return ok && p.Online == online && (!online || slices.Contains(p.Capabilities, link.CapDiag))
	}) {
		t.FailNow()
	}
}

// Issue 39 item 3: a logs or self-test request made on any node reaches
// the device wherever it is connected. Three edges on one JetStream; the
// devices connect to edge-a, the operator asks edge-b (and edge-c, whose
// diag timeout is short): the log and the self-test come back as on one
// server; the device's own error is a 502 naming it; a peer no edge holds
// (it left, or its presence is gone) a 409 naming it; a device that never
// answers a 504 within the asker's timeout, and edge-a stops waiting too;
// each request an event on the asker's channel log.
func TestClusterDiagFromAnyNode(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	node := func(name string, timeout time.Duration) *testServer {
		cfg := config.Default()
		cfg.Workspace = t.TempDir()
		withAdmin(t)(cfg)
		cfg.Cluster = config.Cluster{NATS: []string{url}, Role: config.RoleEdge, Name: name, Partitions: 1, Replicas: 1,
			AckWait: time.Second, Lease: time.Second, DuplicateWindow: time.Minute, DedupeTTL: time.Hour}
		return serve(t, cfg, Options{diagTimeout: timeout})
	}
	a, b, c := node("edge-a", 0), node("edge-b", 0), node("edge-c", 300*time.Millisecond)

	kiosk := dialDiagDevice(t, a, "kiosk", func(q *link.Diag) *link.DiagResult {
		if q.Kind == link.DiagSelftest {
			return &link.DiagResult{RequestID: q.RequestID, Kind: q.Kind, Text: "selftest: PASS (5 checks)\n", OK: true}
		}
		return &link.DiagResult{RequestID: q.RequestID, Kind: q.Kind, Text: "level=INFO msg=\"termd starting\"\n"}
	})
	dialDiagDevice(t, a, "broken", func(q *link.Diag) *link.DiagResult {
		return &link.DiagResult{RequestID: q.RequestID, Kind: q.Kind, Error: "the log file is gone"}
	})
	mute := dialDiagDevice(t, a, "mute", func(*link.Diag) *link.DiagResult { return nil })
	leaving := dialDiagDevice(t, a, "leaving", func(*link.Diag) *link.DiagResult { return nil })
	ghost := dialDiagDevice(t, a, "ghost", func(*link.Diag) *link.DiagResult { return nil })
	for _, p := range []string{"kiosk", "broken", "mute", "leaving", "ghost"} {
		seenOnline(t, b, p, true)
	}
	seenOnline(t, c, "mute", true)

	// The log and the self-test, asked on edge-b.
	if code, body := operatorCall(t, b, "GET", "kiosk/logs?bytes=1000"); code != 200 || body != "level=INFO msg=\"termd starting\"\n" {
		t.Fatalf("logs on edge-b: %d %q", code, body)
	}
	if q := <-kiosk.got; q.Kind != link.DiagLogs || q.Bytes != 1000 {
		t.Errorf("the device got %+v", q)
	}
	code, body := operatorCall(t, b, "POST", "kiosk/selftest")
	var st diag.SelftestAnswer
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || !st.OK || st.Text != "selftest: PASS (5 checks)\n" {
		t.Fatalf("selftest on edge-b: %d %s", code, body)
	}
	<-kiosk.got
	// The node holding it answers as before (its own connection).
	if code, body := operatorCall(t, a, "GET", "kiosk/logs"); code != 200 || !strings.Contains(body, "termd starting") {
		t.Errorf("logs on edge-a: %d %q", code, body)
	}
	<-kiosk.got

	// The device's own error.
	if code, body := operatorCall(t, b, "GET", "broken/logs"); code != 502 || !strings.Contains(body, "peer broken: the log file is gone") {
		t.Errorf("the device's error: %d %s", code, body)
	}

	// Not connected anywhere: it left (the view says so), or no edge
	// holds it (its presence is gone while the view still shows it).
	leaving.c.ws.Close()
	<-leaving.done
	seenOnline(t, b, "leaving", false)
	if code, body := operatorCall(t, b, "GET", "leaving/logs"); code != 409 || !strings.Contains(body, "peer leaving is not connected") {
		t.Errorf("a device that left: %d %s", code, body)
	}
	dropPresence(t, url, "ghost")
	if code, body := operatorCall(t, b, "POST", "ghost/selftest"); code != 409 || !strings.Contains(body, "peer ghost is not connected") {
		t.Errorf("a device no edge holds: %d %s", code, body)
	}
	select {
	case q := <-ghost.got:
		t.Errorf("the device no edge holds got %+v", q)
	default:
	}

	// No answer: the asker's timeout (edge-c's 300ms); edge-a waits no
	// longer.
	if code, body := operatorCall(t, c, "GET", "mute/logs"); code != 504 || !strings.Contains(body, "peer mute did not answer the logs request within 300ms") {
		t.Errorf("no answer: %d %s", code, body)
	}
	if q := <-mute.got; q.Kind != link.DiagLogs {
		t.Errorf("the mute device got %+v", q)
	}
	waitUntil(t, "edge-a to stop waiting for the mute device", func() bool { return clusterStore(a).Node().Serving() == 0 })

	// Each request an event on the asker's log, naming the operator.
	var details []string
	for _, e := range b.rt.Channels["terminal-dev"].Events.Recent(100) {
		if e.Event == diag.EventLogs || e.Event == diag.EventSelftest {
			details = append(details, e.PeerID+": "+e.Detail)
		}
	}
	all := strings.Join(details, "\n")
	for _, want := range []string{"kiosk: by otto: 32 bytes in", "kiosk: by otto: PASS in", "broken: by otto: peer broken: the log file is gone",
		"leaving: by otto: peer leaving is not connected", "ghost: by otto: peer ghost is not connected"} {
		if !strings.Contains(all, want) {
			t.Errorf("edge-b's events lack %q:\n%s", want, all)
		}
	}
	var cEvents []string
	for _, e := range c.rt.Channels["terminal-dev"].Events.Recent(100) {
		cEvents = append(cEvents, e.Detail)
	}
	if !strings.Contains(strings.Join(cEvents, "\n"), "by otto: peer mute did not answer the logs request within 300ms") {
		t.Errorf("edge-c's events lack the timeout:\n%s", strings.Join(cEvents, "\n"))
	}
}

// dropPresence deletes peer's entry in the presence bucket (as if the
// edge holding it cleared it), leaving its connection and the registry.
func dropPresence(t *testing.T, url, peer string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, cluster.PresenceBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Peer string }
		if json.Unmarshal(e.Value(), &p) == nil && p.Peer == peer {
			if err := kv.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no presence of %s", peer)
}
