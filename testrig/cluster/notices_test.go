package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/testrig/cluster"
)

// Notice mailboxes across the cluster (issue 25): devices with the
// notice capability on both edges; a notice for one peer, a broadcast to
// a list of peers, one by tag and one to every peer, all POSTed to the
// worker (the tag and "all" broadcasts find the peers in the cluster's
// registry), reach every device they are for exactly once on its screen, whichever edge holds it. Then edge 1 is killed
// (SIGKILL) while a notice for one of its devices is being POSTed, and
// another is POSTed while the device is away: the device reconnects to
// edge 2 and shows both, once. A device that was sent a notice on edge 1
// and had not acked it when edge 1 died is sent it again on edge 2. The
// cluster lists every delivery acked.
func TestNoticesAcrossEdges(t *testing.T) {
	cluster.Heavy(t)
	tc := startCluster(t, clusterOpts{edges: 2, workers: 1})
	edge1, edge2, worker := tc.edges[0], tc.edges[1], tc.workers[0]
	ch := "/api/channels/" + cluster.Channel

	// kiosk-1 and kiosk-2 on edge 1 (site lobby), kiosk-3 and kiosk-4 on
	// edge 2 (site hall). Edge 1 sees all four first, so that its
	// device registry (a broadcast's directory) knows them.
	devs := map[string]*noticeDevice{}
	for i, site := range []string{"lobby", "lobby", "hall", "hall"} {
		peer := fmt.Sprintf("kiosk-%d", i+1)
		d := newNoticeDevice(t, peer, site)
		d.connect(edge1.WSURL(), edge2.WSURL())
		d.waitOnline()
		devs[peer] = d
	}
	for _, p := range []string{"kiosk-3", "kiosk-4"} {
		devs[p].connect(edge2.WSURL(), edge1.WSURL())
		devs[p].waitOnline()
	}
	post := func(s *cluster.Server, path, body string) string {
		t.Helper()
		var created struct {
			IDs []string `json:"notice_ids"`
		}
		if st := call(t, http.MethodPost, s.HTTPURL()+ch+path, body, &created); st != http.StatusCreated || len(created.IDs) != 1 {
			t.Fatalf("POST %s to %s: %d %+v", body, s.Spec.Name, st, created)
		}
		return created.IDs[0]
	}
	want := map[string][]string{} // peer -> notice ids it must show
	expect := func(id string, peers ...string) {
		for _, p := range peers {
			want[p] = append(want[p], id)
		}
	}
	all := []string{"kiosk-1", "kiosk-2", "kiosk-3", "kiosk-4"}
	expect(post(worker, "/peers/kiosk-3/notices", `{"text":"for kiosk-3"}`), "kiosk-3")
	expect(post(worker, "/notices", `{"text":"to a list","peers":["kiosk-1","kiosk-4"]}`), "kiosk-1", "kiosk-4")
	expect(post(worker, "/notices", `{"text":"to the hall","tags":{"site":"hall"}}`), "kiosk-3", "kiosk-4")
	expect(post(worker, "/notices", `{"text":"to all"}`), all...)
	for _, p := range all {
		devs[p].waitShown(want[p])
	}

	// A device without a screen's confirmation yet: kiosk-5 (a raw
	// WebSocket on edge 1) is sent a notice and has not acked it when
	// edge 1 dies; on edge 2 it is sent again, and its ack there holds.
	raw := dialNotices(t, edge1.WSURL(), "kiosk-5")
	sentBefore := post(worker, "/peers/kiosk-5/notices", `{"text":"sent, not acked"}`)
	if got := readNotice(t, raw); got != sentBefore {
		t.Fatalf("kiosk-5 on edge 1 was sent %q, want %q", got, sentBefore)
	}

	// Edge 1 dies while a notice for kiosk-1 is posted to the worker.
	var wg sync.WaitGroup
	var inFlight string
	wg.Add(1)
	go func() {
		defer wg.Done()
		inFlight = post(worker, "/peers/kiosk-1/notices", `{"text":"in flight"}`)
	}()
	edge1.Kill()
	wg.Wait()
	expect(inFlight, "kiosk-1")
	expect(post(worker, "/peers/kiosk-1/notices", `{"text":"while away"}`), "kiosk-1")
	raw.Close()
	raw = dialNotices(t, edge2.WSURL(), "kiosk-5")
	if got := readNotice(t, raw); got != sentBefore {
		t.Fatalf("kiosk-5 on edge 2 was sent %q, want %q again", got, sentBefore)
	}
	_ = raw.SetWriteDeadline(time.Now().Add(waitFor))
	if err := raw.WriteMessage(websocket.TextMessage, link.MustEncode(&link.NoticeAck{NoticeID: sentBefore})); err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		devs[p].waitShown(want[p])
	}
	if n := devs["kiosk-1"].connects(); n < 2 {
		t.Errorf("kiosk-1 connected %d times; it should have moved to edge 2", n)
	}

	// Every delivery is acked, as any node lists it: no notice is sent
	// again after that.
	var listed struct {
		Notices []struct {
			NoticeID string `json:"notice_id"`
			Peers    []struct {
				PeerID string `json:"peer_id"`
				State  string `json:"state"`
			} `json:"peers"`
		} `json:"notices"`
	}
	testwait.UntilOK(t, "edge 2 listing 7 notices, their 12 deliveries acked", func() error {
		listed.Notices = nil
		st := call(t, http.MethodGet, edge2.HTTPURL()+ch+"/notices?all=true", "", &listed)
		var states []string
		acked := 0
		for _, n := range listed.Notices {
			for _, p := range n.Peers {
				states = append(states, p.PeerID+"="+p.State)
				if p.State == "acked" {
					acked++
				}
			}
		}
		if st != http.StatusOK || len(listed.Notices) != 7 || acked != 12 || len(states) != 12 {
			return fmt.Errorf("HTTP %d: %d notices, %d of 12 deliveries acked: %v", st, len(listed.Notices), acked, states)
		}
		return nil
	})
	// A resend sent before the last ack was recorded is on its way: each
	// device's socket brings it before the reply to a message sent now
	// (one writer per socket, frames in order). Then each device has
	// drawn each of its notices once.
	for _, p := range all {
		devs[p].roundTrip("after the acks")
		devs[p].checkOnce(want[p])
	}
}

// dialNotices connects a raw device that takes notices as peer.
func dialNotices(t *testing.T, url, peer string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: waitFor}
	ws, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatalf("%s: %v", peer, err)
	}
	t.Cleanup(func() { ws.Close() })
	_ = ws.SetWriteDeadline(time.Now().Add(waitFor))
	if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(&link.Connect{PeerID: peer, Capabilities: []string{link.CapText, link.CapNotice}})); err != nil {
		t.Fatal(err)
	}
	return ws
}

// readNotice reads ws's frames until a notice and returns its id.
func readNotice(t *testing.T, ws *websocket.Conn) string {
	t.Helper()
	_ = ws.SetReadDeadline(time.Now().Add(waitFor))
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for a notice: %v", err)
		}
		f, err := link.Decode(data)
		if err != nil {
			t.Fatalf("frame %s: %v", data, err)
		}
		if n, ok := f.(*link.Notice); ok {
			return n.NoticeID
		}
	}
}

// noticeDevice is a device that shows notices: a link.Client with the
// notice capability whose every EventNotice is a notice drawn on its
// screen (then confirmed: NoticeShown). Its shown ids are kept in its
// state dir across clients, as termd keeps them.
type noticeDevice struct {
	t    *testing.T
	peer string
	site string
	dir  string

	mu      sync.Mutex
	c       *link.Client
	done    chan struct{}
	online  bool
	connN   int
	shown   map[string]int  // notice id -> times drawn
	replied map[string]bool // message id -> its final answer came
	changed chan struct{}
}

func newNoticeDevice(t *testing.T, peer, site string) *noticeDevice {
	d := &noticeDevice{t: t, peer: peer, site: site, dir: t.TempDir(), shown: map[string]int{}, replied: map[string]bool{}, changed: make(chan struct{})}
	t.Cleanup(d.close)
	return d
}

// connect starts a new client on url (then the fallbacks), after closing
// the current one.
func (d *noticeDevice) connect(url string, fallbacks ...string) {
	d.t.Helper()
	d.close()
	c, err := link.NewClient(link.ClientConfig{URL: url, Fallbacks: fallbacks, PeerID: d.peer, DeviceName: d.peer,
		StateDir: d.dir, Tags: map[string]string{"site": d.site},
		Capabilities: append(link.DefaultCapabilities(), link.CapNotice),
		RetryInitial: 100 * time.Millisecond, RetryMax: time.Second, Heartbeat: 2 * time.Second, PongTimeout: 3 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		d.t.Fatal(err)
	}
	run, ev := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(run); _ = c.Run(context.Background()) }()
	go func() {
		defer close(ev)
		for e := range c.Events() {
			d.mu.Lock()
			switch e.Kind {
			case link.EventState:
				d.online = e.State == link.StateConnected
				if d.online {
					d.connN++
				}
			case link.EventNotice:
				d.shown[e.Notice.NoticeID]++
			}
			if e.Final {
				d.replied[e.MessageID] = true
			}
			close(d.changed)
			d.changed = make(chan struct{})
			d.mu.Unlock()
			if e.Kind == link.EventNotice {
				_ = c.NoticeShown(e.Notice.NoticeID)
			}
			if e.Final {
				_ = c.Delivered(e.MessageID)
			}
		}
	}()
	go func() { <-run; <-ev; close(done) }()
	d.mu.Lock()
	d.c, d.done, d.online = c, done, false
	d.mu.Unlock()
}

func (d *noticeDevice) close() {
	d.mu.Lock()
	c, done := d.c, d.done
	d.c = nil
	d.mu.Unlock()
	if c != nil {
		_ = c.Close()
		<-done
	}
}

func (d *noticeDevice) connects() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.connN
}

func (d *noticeDevice) waitUntil(what string, ok func() bool) {
	d.t.Helper()
	deadline := time.After(waitFor)
	for {
		d.mu.Lock()
		done, ch := ok(), d.changed
		d.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			d.mu.Lock()
			shown := fmt.Sprint(d.shown)
			d.mu.Unlock()
			d.t.Fatalf("%s: not within %s: %s (shown %s)", d.peer, waitFor, what, shown)
		}
	}
}

// roundTrip sends text as a message and waits for its final answer.
func (d *noticeDevice) roundTrip(text string) {
	d.t.Helper()
	d.mu.Lock()
	c := d.c
	d.mu.Unlock()
	id, err := c.Send(context.Background(), text)
	if err != nil {
		d.t.Fatal(err)
	}
	d.waitUntil("the answer to "+id, func() bool { return d.replied[id] })
}

func (d *noticeDevice) waitOnline() { d.waitUntil("online", func() bool { return d.online }) }

// waitShown waits until every one of ids was drawn.
func (d *noticeDevice) waitShown(ids []string) {
	d.t.Helper()
	d.waitUntil(fmt.Sprintf("shows %v", ids), func() bool {
		for _, id := range ids {
			if d.shown[id] == 0 {
				return false
			}
		}
		return true
	})
}

// checkOnce checks that exactly ids were drawn, each once.
func (d *noticeDevice) checkOnce(ids []string) {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	var got []string
	for id, n := range d.shown {
		got = append(got, id)
		if n != 1 {
			d.t.Errorf("%s drew notice %s %d times", d.peer, id, n)
		}
	}
	sort.Strings(got)
	w := slices.Clone(ids)
	sort.Strings(w)
	if !slices.Equal(got, w) {
		d.t.Errorf("%s drew %s, want %s", d.peer, strings.Join(got, ","), strings.Join(w, ","))
	}
}
