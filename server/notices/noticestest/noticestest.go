// Package noticestest is the contract every notices.Storage passes under
// the notice mailboxes (notices.Service): the same life of a delivery
// (pending, sent, acked, withdrawn, expired), the same bounds per peer,
// pruning when a record is applied, expiry, the same events and metrics,
// the Changed hook, the API's answers, and what a store keeps when the
// mailboxes are opened again. Package notices runs it on LocalStorage,
// package cluster on its JetStream KV; what only one store does (the
// write-ahead log's crash and replay, two nodes at once) each tests on
// its own.
package noticestest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/server/events"
	"termlink/server/metrics"
	"termlink/server/notices"
)

// NewStore returns a new, empty store and a way to open mailboxes on
// it: each call of open is another handle on the same store (the
// workspace opened again once the previous handle is closed, another
// node). The handle is not started; the contract starts and closes it.
type NewStore func(t *testing.T) (open func(opt notices.Options) *notices.Service)

// Run runs the contract.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Lifecycle", func(t *testing.T) { lifecycle(t, newStore(t)) })
	t.Run("Withdraw", func(t *testing.T) { withdraw(t, newStore(t)) })
	t.Run("Bounds", func(t *testing.T) { bounds(t, newStore(t)) })
	t.Run("Expiry", func(t *testing.T) { expiry(t, newStore(t)) })
	t.Run("Reopen", func(t *testing.T) { reopen(t, newStore(t)) })
	t.Run("API", func(t *testing.T) { api(t, newStore(t)) })
	t.Run("FromAgent", func(t *testing.T) { fromAgent(t, newStore(t)) })
}

// Clock is a clock a test moves.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock starts at the wall clock's now (stores that take a record's
// expiry as a time to live see a real one).
func NewClock() *Clock { return &Clock{now: time.Now()} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Rig is one handle's hooks: what it was told (events, changes, pushes)
// and its metrics.
type Rig struct {
	Clock *Clock
	Reg   *metrics.Registry

	mu      sync.Mutex
	events  []string
	changed []string
	pushed  []string
	online  map[string]bool
}

// Options are notices.Options over the rig: a sweeper that never runs by
// itself (the test calls Sweep), the clock, the hooks.
func (r *Rig) Options(maxPerPeer int) notices.Options {
	return notices.Options{Sweep: time.Hour, Now: r.Clock.Now, Metrics: r.Reg,
		MaxPerPeer: func(string) int { return maxPerPeer },
		Event: func(_ string, e events.Event) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.events = append(r.events, e.Event+" "+e.MessageID+" "+e.PeerID)
		},
		Changed: func(ch, p string) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.changed = append(r.changed, p)
		},
		Push: func(ch, p string) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.pushed = append(r.pushed, p)
			return r.online[p]
		},
	}
}

// NewRig is a rig on clock (nil: a new one).
func NewRig(clock *Clock) *Rig {
	if clock == nil {
		clock = NewClock()
	}
	return &Rig{Clock: clock, Reg: &metrics.Registry{}, online: map[string]bool{}}
}

// Events is the events recorded, "name notice_id peer_id" each.
func (r *Rig) Events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Changed is the peers the Changed hook was told of.
func (r *Rig) Changed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changed)
}

// Metric is the value of a series of channel "ch" (0 when absent).
func (r *Rig) Metric(name string) int64 {
	var b bytes.Buffer
	r.Reg.WriteText(&b)
	sc := bufio.NewScanner(&b)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+`{channel="ch"} `); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// Help is the help text of a metric.
func (r *Rig) Help(name string) string {
	var b bytes.Buffer
	r.Reg.WriteText(&b)
	sc := bufio.NewScanner(&b)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HELP "+name+" "); ok {
			return v
		}
	}
	return ""
}

func start(t *testing.T, open func(notices.Options) *notices.Service, opt notices.Options) *notices.Service {
	t.Helper()
	s := open(opt)
	s.Start()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Spec is a notice that expires ttl after now.
func Spec(text string, now time.Time, ttl time.Duration) notices.Spec {
	return notices.Spec{Text: text, Priority: "info", DisplaySeconds: 15, ExpiresAt: now.Add(ttl), Source: "api"}
}

// States is "text=state" of each notice.
func States(l []notices.PeerNotice) string {
	var s []string
	for _, n := range l {
		s = append(s, n.Text+"="+n.State)
	}
	return strings.Join(s, ",")
}

// MetricNames and their help text: the console and the docs rely on them.
var MetricNames = map[string]string{
	"termlink_notices_created_total":   "Notices put in a peer's mailbox (a broadcast counts once per peer).",
	"termlink_notices_acked_total":     "Notices a device acked (drawn).",
	"termlink_notices_expired_total":   "Notices that expired before their device acked them.",
	"termlink_notices_withdrawn_total": "Notices withdrawn before their device acked them.",
	"termlink_notices_pending":         "Notices in mailboxes not yet acked, expired or withdrawn.",
	"termlink_notice_mailboxes":        "Peers with at least one notice not yet acked.",
}

// A notice's life with one peer: due, sent, acked; the other peer's
// stays open. An ack is taken once; an unknown notice or peer is
// refused. The events, counters, gauges and Changed say so.
func lifecycle(t *testing.T, open func(notices.Options) *notices.Service) {
	r := NewRig(nil)
	s := start(t, open, r.Options(10))
	res, err := s.Create("ch", []string{"p", "q"}, Spec("hello", r.Clock.Now(), time.Hour))
	if err != nil || len(res.Targets) != 2 || len(res.Skipped) != 0 || res.NoticeID == "" {
		t.Fatalf("create: %+v %v", res, err)
	}
	frames, ids, last, more := s.Due("ch", "p", 0, 10, r.Clock.Now())
	if len(frames) != 1 || ids[0] != res.NoticeID || more || last == 0 ||
		!strings.Contains(string(frames[0]), `"type":"notice"`) || !strings.Contains(string(frames[0]), res.NoticeID) {
		t.Fatalf("due: %q %v %d %v", frames, ids, last, more)
	}
	if f, _, l2, _ := s.Due("ch", "p", last, 10, r.Clock.Now()); len(f) != 0 || l2 != last {
		t.Errorf("due after the cursor: %q %d", f, l2)
	}
	s.MarkSent("ch", "p", ids, r.Clock.Now())
	if got := s.ListPeer("ch", "p", false); States(got) != "hello=sent" || got[0].SentAt == nil {
		t.Fatalf("after MarkSent: %+v", got)
	}
	if err := s.Ack("ch", "p", res.NoticeID); err != nil {
		t.Fatal(err)
	}
	if got := s.ListPeer("ch", "p", true); States(got) != "hello=acked" || got[0].AckedAt == nil {
		t.Fatalf("after the ack: %+v", got)
	}
	if got := s.ListPeer("ch", "p", false); len(got) != 0 {
		t.Errorf("open after the ack: %+v", got)
	}
	if s.Count("ch", "p") != 0 || s.Count("ch", "q") != 1 {
		t.Errorf("counts: p %d, q %d", s.Count("ch", "p"), s.Count("ch", "q"))
	}
	if f, _, _, _ := s.Due("ch", "p", 0, 10, r.Clock.Now()); len(f) != 0 {
		t.Errorf("an acked notice is due: %q", f)
	}
	if err := s.Ack("ch", "p", res.NoticeID); err != nil {
		t.Errorf("second ack: %v", err)
	}
	for _, c := range [][2]string{{"p", "n-000000000000000000"}, {"r", res.NoticeID}, {"p", "bad.id"}} {
		if err := s.Ack("ch", c[0], c[1]); !errors.Is(err, notices.ErrUnknownNotice) {
			t.Errorf("ack %v: %v", c, err)
		}
	}
	l := s.List("ch", false)
	if len(l) != 1 || l[0].NoticeID != res.NoticeID || len(l[0].Peers) != 2 || l[0].Peers[0].PeerID != "p" || l[0].Peers[0].State != notices.Acked || l[0].Peers[1].State != notices.Pending {
		t.Errorf("list: %+v", l)
	}
	if n := s.ForPeer("ch", "q").([]notices.PeerNotice); len(n) != 1 {
		t.Errorf("ForPeer q: %+v", n)
	}
	want := []string{"notice_created " + res.NoticeID + " ", "notice_sent " + res.NoticeID + " p", "notice_acked " + res.NoticeID + " p"}
	if got := r.Events(); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if got := r.Changed(); !slices.Equal(got, []string{"p", "q", "p"}) {
		t.Errorf("changed %v", got)
	}
	for name, v := range map[string]int64{"termlink_notices_created_total": 2, "termlink_notices_acked_total": 1,
		"termlink_notices_pending": 1, "termlink_notice_mailboxes": 1} {
		if got := r.Metric(name); got != v {
			t.Errorf("%s = %d, want %d", name, got, v)
		}
	}
	for name, help := range MetricNames {
		if got := r.Help(name); got != help {
			t.Errorf("help of %s: %q, want %q", name, got, help)
		}
	}
}

// A withdrawal takes a notice from one peer or from all where it is not
// yet acked, and counts each delivery once; a peer it was not for, or a
// notice never made, is refused.
func withdraw(t *testing.T, open func(notices.Options) *notices.Service) {
	r := NewRig(nil)
	s := start(t, open, r.Options(10))
	w, err := s.Create("ch", []string{"p", "q", "r"}, Spec("withdraw me", r.Clock.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ack("ch", "r", w.NoticeID); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Withdraw("ch", w.NoticeID, "q"); n != 1 || err != nil {
		t.Fatalf("withdraw q: %d %v", n, err)
	}
	if _, err := s.Withdraw("ch", w.NoticeID, "z"); !errors.Is(err, notices.ErrUnknownNotice) {
		t.Errorf("withdraw from a peer it was not for: %v", err)
	}
	if _, err := s.Withdraw("other", w.NoticeID, ""); !errors.Is(err, notices.ErrUnknownNotice) {
		t.Errorf("withdraw on another channel: %v", err)
	}
	if _, err := s.Withdraw("ch", "n-000000000000000000", ""); !errors.Is(err, notices.ErrUnknownNotice) {
		t.Errorf("withdraw of an unknown notice: %v", err)
	}
	if got := States(s.ListPeer("ch", "q", true)); got != "withdraw me=withdrawn" {
		t.Errorf("q: %s", got)
	}
	if n, err := s.Withdraw("ch", w.NoticeID, ""); n != 1 || err != nil {
		t.Fatalf("withdraw all: %d %v", n, err)
	}
	if n, err := s.Withdraw("ch", w.NoticeID, ""); n != 0 || err != nil {
		t.Fatalf("withdraw all again: %d %v", n, err)
	}
	if s.Count("ch", "p") != 0 || States(s.ListPeer("ch", "r", true)) != "withdraw me=acked" {
		t.Errorf("after: p %d, r %s", s.Count("ch", "p"), States(s.ListPeer("ch", "r", true)))
	}
	if l := s.List("ch", false); len(l) != 0 {
		t.Errorf("open notices: %+v", l)
	}
	if l := s.List("ch", true); len(l) != 1 {
		t.Errorf("all notices: %+v", l)
	}
	if got := r.Metric("termlink_notices_withdrawn_total"); got != 2 {
		t.Errorf("withdrawn counter %d, want 2 (once per delivery)", got)
	}
	var ws []string
	for _, e := range r.Events() {
		if strings.HasPrefix(e, "notice_withdrawn") {
			ws = append(ws, e)
		}
	}
	if want := []string{"notice_withdrawn " + w.NoticeID + " q", "notice_withdrawn " + w.NoticeID + " "}; !slices.Equal(ws, want) {
		t.Errorf("withdrawal events %q, want %q", ws, want)
	}
	if got := r.Changed(); !slices.Equal(got, []string{"p", "q", "r", "r", "q", "p"}) {
		t.Errorf("changed %v", got)
	}
	if got := r.Metric("termlink_notices_pending"); got != 0 {
		t.Errorf("pending gauge %d", got)
	}
}

// A full mailbox refuses a create, and a broadcast skips the full peer;
// an ack frees a place. Finished deliveries beyond the bound are pruned
// when the record that makes them too many is applied, oldest first.
func bounds(t *testing.T, open func(notices.Options) *notices.Service) {
	r := NewRig(nil)
	s := start(t, open, r.Options(2))
	now := r.Clock.Now()
	var first string
	for i := range 2 {
		res, err := s.Create("ch", []string{"p"}, Spec("n"+strconv.Itoa(i), now, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res.NoticeID
		}
	}
	_, err := s.Create("ch", []string{"p"}, Spec("third", now, time.Hour))
	var full *notices.MailboxFullError
	if !errors.As(err, &full) || full.Max != 2 || !slices.Equal(full.Peers, []string{"p"}) || !strings.Contains(err.Error(), "maxNoticesPerPeer") {
		t.Fatalf("a third notice for a full mailbox: %v", err)
	}
	res, err := s.Create("ch", []string{"p", "q"}, Spec("broadcast", now, time.Hour))
	if err != nil || !slices.Equal(res.Skipped, []string{"p"}) || !slices.Equal(res.Targets, []string{"q"}) {
		t.Fatalf("broadcast with p full: %+v %v", res, err)
	}
	if err := s.Ack("ch", "p", first); err != nil {
		t.Fatal(err)
	}
	if s.Count("ch", "p") != 1 {
		t.Fatalf("count after the ack: %d", s.Count("ch", "p"))
	}
	var acked []string
	for i := range 2 {
		res, err := s.Create("ch", []string{"p"}, Spec("more"+strconv.Itoa(i), now, time.Hour))
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if err := s.Ack("ch", "p", res.NoticeID); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, res.NoticeID)
	}
	// Three finished (first, more0, more1) beside one open (n1): the
	// ack of more1 pruned the oldest finished, at once.
	if got := States(s.ListPeer("ch", "p", true)); got != "n1=pending,more0=acked,more1=acked" {
		t.Fatalf("after three acks: %s", got)
	}
	if _, err := s.Withdraw("ch", first, ""); !errors.Is(err, notices.ErrUnknownNotice) {
		t.Errorf("the pruned notice is still known: %v", err)
	}
	if err := s.Ack("ch", "p", first); !errors.Is(err, notices.ErrUnknownNotice) {
		t.Errorf("the pruned delivery is still in the store: %v", err)
	}
	if _, err := s.Create("ch", []string{"p"}, Spec("last", now, time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := States(s.ListPeer("ch", "p", true)); got != "n1=pending,more0=acked,more1=acked,last=pending" || s.Count("ch", "p") != 2 {
		t.Fatalf("at the end: %s, count %d", got, s.Count("ch", "p"))
	}
}

// An open notice expires at expires_at: never due past it, listed
// expired, marked expired by a sweep (counted, one event), and forgotten
// KeepExpired later.
func expiry(t *testing.T, open func(notices.Options) *notices.Service) {
	r := NewRig(nil)
	s := start(t, open, r.Options(10))
	now := r.Clock.Now()
	sp := Spec("soon", now, time.Minute)
	res, err := s.Create("ch", []string{"p", "q", "r"}, sp)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ack("ch", "r", res.NoticeID); err != nil {
		t.Fatal(err)
	}
	exp := sp.ExpiresAt.Truncate(time.Second)
	if f, _, _, _ := s.Due("ch", "p", 0, 10, exp.Add(-time.Second)); len(f) != 1 {
		t.Fatalf("due before expiry: %d", len(f))
	}
	if f, _, _, _ := s.Due("ch", "p", 0, 10, exp.Add(time.Second)); len(f) != 0 {
		t.Fatalf("due after expiry: %d", len(f))
	}
	r.Clock.Add(exp.Sub(now) + time.Second)
	if got := States(s.ListPeer("ch", "q", true)); got != "soon=expired" {
		t.Errorf("listed before the sweep: %s", got)
	}
	if s.Count("ch", "p") != 0 {
		t.Errorf("counted past expiry before the sweep: %d", s.Count("ch", "p"))
	}
	s.Sweep(r.Clock.Now())
	s.Sweep(r.Clock.Now()) // a second sweep finds nothing to do
	if got := r.Metric("termlink_notices_expired_total"); got != 2 {
		t.Errorf("expired counter %d, want 2", got)
	}
	if got := r.Metric("termlink_notices_pending"); got != 0 {
		t.Errorf("pending gauge %d", got)
	}
	if got := States(s.ListPeer("ch", "q", true)) + " " + States(s.ListPeer("ch", "r", true)); got != "soon=expired soon=acked" {
		t.Errorf("after the sweep: %s", got)
	}
	var ex []string
	for _, e := range r.Events() {
		if strings.HasPrefix(e, "notice_expired") {
			ex = append(ex, e)
		}
	}
	if len(ex) != 1 {
		t.Errorf("expiry events %q", ex)
	}
	if got := r.Changed(); !slices.Equal(got, []string{"p", "q", "r", "r", "p", "q"}) {
		t.Errorf("changed %v", got)
	}
	if err := s.Ack("ch", "p", res.NoticeID); err != nil {
		t.Errorf("ack of an expired notice: %v", err)
	}
	if got := States(s.ListPeer("ch", "p", true)); got != "soon=expired" {
		t.Errorf("an expired notice acked: %s", got)
	}
	r.Clock.Add(notices.KeepExpired + 2*time.Minute)
	s.Sweep(r.Clock.Now())
	if got := s.ListPeer("ch", "q", true); len(got) != 0 {
		t.Fatalf("after KeepExpired: %+v", got)
	}
	if l := s.List("ch", true); len(l) != 0 {
		t.Fatalf("listed after KeepExpired: %+v", l)
	}
	if _, err := s.Withdraw("ch", res.NoticeID, ""); !errors.Is(err, notices.ErrUnknownNotice) {
		t.Fatalf("withdraw of a forgotten notice: %v", err)
	}
}

// What the store holds is there when the mailboxes are opened again:
// the notices, acks, withdrawals, in created order; a reopened handle's
// connection is sent what is open.
func reopen(t *testing.T, open func(notices.Options) *notices.Service) {
	r := NewRig(nil)
	s := open(r.Options(10))
	s.Start()
	now := r.Clock.Now()
	var ids []string
	for _, text := range []string{"a", "b", "c"} {
		res, err := s.Create("ch", []string{"p", "q"}, Spec(text, now, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.NoticeID)
	}
	if err := s.Ack("ch", "p", ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Withdraw("ch", ids[1], "q"); err != nil {
		t.Fatal(err)
	}
	_, due, _, _ := s.Due("ch", "p", 0, 10, now)
	s.MarkSent("ch", "p", due, now)
	want := "a=acked,b=sent,c=sent"
	if got := States(s.ListPeer("ch", "p", true)); got != want {
		t.Fatalf("before: %s", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := start(t, open, NewRig(r.Clock).Options(10))
	// "sent" is written behind (Close writes what is queued); a store
	// that lost it says pending, which the device is sent again anyway.
	if got := strings.ReplaceAll(States(s2.ListPeer("ch", "p", true)), "=pending", "=sent"); got != want {
		t.Errorf("p after reopening: %s", got)
	}
	if got := States(s2.ListPeer("ch", "q", true)); got != "a=pending,b=withdrawn,c=pending" {
		t.Errorf("q after reopening: %s", got)
	}
	if _, due, _, _ := s2.Due("ch", "p", 0, 10, now); !slices.Equal(due, ids[1:]) {
		t.Errorf("due after reopening: %v, want %v", due, ids[1:])
	}
	if l := s2.List("ch", true); len(l) != 3 || l[0].NoticeID != ids[0] || l[2].NoticeID != ids[2] {
		t.Errorf("list after reopening: %+v", l)
	}
	if err := s2.Ack("ch", "p", ids[2]); err != nil || s2.Count("ch", "p") != 1 {
		t.Errorf("ack after reopening: %v, count %d", err, s2.Count("ch", "p"))
	}
}

// The API over the mailboxes: POST to a peer and to all (the directory),
// GET of a peer's and the channel's, DELETE; the answers' bodies.
func api(t *testing.T, open func(notices.Options) *notices.Service) {
	r := NewRig(nil)
	opt := r.Options(10)
	opt.Directory = dir{"p", "q"}
	r.online["p"] = true
	s := start(t, open, opt)
	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
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
	code, out := do("POST", "/api/channels/ch/notices", `{"text":"to all"}`)
	if code != 201 || out["targets"] != 2.0 || out["online"] != 1.0 || len(out["skipped"].([]any)) != 0 {
		t.Fatalf("broadcast: HTTP %d %v", code, out)
	}
	id := out["notice_ids"].([]any)[0].(string)
	code, out = do("POST", "/api/channels/ch/peers/q/notices", `{"text":"to q","priority":"alert"}`)
	if code != 201 || out["targets"] != 1.0 || out["skipped"] != nil {
		t.Fatalf("to q: HTTP %d %v", code, out)
	}
	if code, out := do("GET", "/api/channels/ch/notices", ""); code != 200 || len(out["notices"].([]any)) != 2 {
		t.Fatalf("GET the channel's: HTTP %d %v", code, out)
	}
	if code, out := do("DELETE", "/api/channels/ch/peers/q/notices/"+id, ""); code != 200 || out["withdrawn"] != 1.0 {
		t.Fatalf("withdraw from q: HTTP %d %v", code, out)
	}
	code, out = do("GET", "/api/channels/ch/peers/q/notices?all=true", "")
	ns, _ := out["notices"].([]any)
	if code != 200 || len(ns) != 2 || ns[0].(map[string]any)["state"] != notices.Withdrawn || ns[1].(map[string]any)["priority"] != "alert" {
		t.Fatalf("q's notices: HTTP %d %v", code, out)
	}
	if code, out := do("DELETE", "/api/channels/ch/notices/n-none", ""); code != 404 || !strings.HasPrefix(out["error"].(string), `channel "ch" has no notice "n-none"`) {
		t.Fatalf("withdraw of an unknown notice: HTTP %d %v", code, out)
	}
}

type dir []string

func (d dir) PeersWithTags(string, map[string]string) []string { return d }

// An agent's push is an info notice from "agent", cut to MaxTextChars.
func fromAgent(t *testing.T, open func(notices.Options) *notices.Service) {
	r := NewRig(nil)
	s := start(t, open, r.Options(10))
	if err := s.FromAgent("ch", "p", strings.Repeat("é", notices.MaxTextChars+5)); err != nil {
		t.Fatal(err)
	}
	got := s.ListPeer("ch", "p", false)
	if len(got) != 1 || got[0].Source != "agent" || got[0].Priority != "info" || got[0].DisplaySeconds != 15 {
		t.Fatalf("pending %+v", got)
	}
	if n := len([]rune(got[0].Text)); n != notices.MaxTextChars || !strings.HasSuffix(got[0].Text, "…") {
		t.Fatalf("text of %d characters, want %d ending in …", n, notices.MaxTextChars)
	}
}
