package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"termlink/internal/testwait"
	"termlink/server/metrics"
	"termlink/server/notices"
	"termlink/server/notices/noticestest"
)

// noticeNode is one node's mailboxes with a fake of what the server
// gives them: the peers connected here (Push), and what was pushed.
type noticeNode struct {
	*notices.Service
	st     *NoticeStorage
	reg    *metrics.Registry
	mu     sync.Mutex
	here   map[string]bool // peers connected to this node
	pushed map[string]int
}

func openNoticeNode(t *testing.T, n *Node, maxPerPeer int, peers ...string) *noticeNode {
	t.Helper()
	nn := &noticeNode{here: map[string]bool{}, pushed: map[string]int{}, reg: &metrics.Registry{}}
	for _, p := range peers {
		nn.here[p] = true
	}
	opt := notices.Options{Sweep: 50 * time.Millisecond, Metrics: nn.reg,
		MaxPerPeer: func(string) int { return maxPerPeer },
		Push: func(ch, peer string) bool {
			nn.mu.Lock()
			defer nn.mu.Unlock()
			if !nn.here[peer] {
				return false
			}
			nn.pushed[peer]++
			return true
		},
		Directory: dirOf{"ch": {"p", "q"}}}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	// A node looks for the bucket every 20 ms (2 s in production) until
	// the first create makes it.
	nn.st = n.NoticeStorage(8<<20, 20*time.Millisecond)
	s, err := notices.New(ctx, nn.st, opt)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { _ = s.Close() })
	nn.Service = s
	return nn
}

func (nn *noticeNode) pushes(peer string) int {
	nn.mu.Lock()
	defer nn.mu.Unlock()
	return nn.pushed[peer]
}

// metric is the value of a series of channel "ch" on this node.
func (nn *noticeNode) metric(name string) int64 {
	var b bytes.Buffer
	nn.reg.WriteText(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+`{channel="ch"} `); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// get reads a record at the bucket.
func (nn *noticeNode) get(t *testing.T, key string) ([]byte, uint64) {
	t.Helper()
	data, rev, err := nn.st.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return data, rev
}

type dirOf map[string][]string

func (d dirOf) PeersWithTags(ch string, _ map[string]string) []string { return d[ch] }

func noticeSpec(text string, ttl time.Duration) notices.Spec {
	return notices.Spec{Text: text, Priority: "info", DisplaySeconds: 15, ExpiresAt: time.Now().Add(ttl), Source: "api"}
}

func states(l []notices.PeerNotice) string { return noticestest.States(l) }

// The contract of package notices on the cluster's store: each handle
// is another node of the same NATS.
func TestNoticesContract(t *testing.T) {
	t.Parallel()
	noticestest.Run(t, func(t *testing.T) func(notices.Options) *notices.Service {
		url := startJetStream(t)
		nodes := 0
		return func(opt notices.Options) *notices.Service {
			nodes++
			n := openNode(t, url, fmt.Sprintf("node-%d", nodes))
			ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
			defer cancel()
			s, err := n.OpenNotices(ctx, NoticesOptions{Options: opt, MaxBytes: 8 << 20, LookEvery: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.Ready():
			case <-ctx.Done():
				t.Fatal("the notice mailboxes did not load")
			}
			return s
		}
	})
}

// Creates on two nodes at once cannot overrun a mailbox's bound: the
// places are taken by compare-and-set of the mailbox's record, not
// counted on each node's state.
func TestNoticesBoundAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openNoticeNode(t, openNode(t, url, "edge-a"), 3)
	b := openNoticeNode(t, openNode(t, url, "edge-b"), 3)
	if _, err := a.Create("ch", []string{"q"}, noticeSpec("make the bucket", time.Hour)); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "B follows the bucket", func() bool { return b.Count("ch", "q") == 1 })
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := a
			if i%2 == 1 {
				node = b
			}
			res, err := node.Create("ch", []string{"p"}, noticeSpec(fmt.Sprint("race ", i), time.Hour))
			var full *notices.MailboxFullError
			switch {
			case err == nil:
				mu.Lock()
				took += len(res.Targets)
				mu.Unlock()
			case !errors.As(err, &full):
				t.Errorf("create %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if took != 3 {
		t.Fatalf("%d creates took a place in a mailbox of 3", took)
	}
	testwait.Until(t, "both nodes hold 3 open for p", func() bool { return a.Count("ch", "p") == 3 && b.Count("ch", "p") == 3 })
}

// A notice created on node A is due on node B, and pushed there to the
// peer B holds; B's device acks it on B and A sees the ack; the other
// peer's delivery stays open on both.
func TestNoticesAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openNoticeNode(t, openNode(t, url, "edge-a"), 10)
	b := openNoticeNode(t, openNode(t, url, "edge-b"), 10, "p")

	res, err := a.Create("ch", []string{"p", "q"}, noticeSpec("hello", time.Hour))
	if err != nil || len(res.Targets) != 2 {
		t.Fatalf("create: %+v %v", res, err)
	}
	var frames [][]byte
	var ids []string
	testwait.Until(t, "the notice is due on B", func() bool {
		frames, ids, _, _ = b.Due("ch", "p", 0, 10, time.Now())
		return len(frames) == 1
	})
	if ids[0] != res.NoticeID || !strings.Contains(string(frames[0]), `"type":"notice"`) || !strings.Contains(string(frames[0]), res.NoticeID) {
		t.Fatalf("due on B: %s %v", frames[0], ids)
	}
	testwait.Until(t, "B pushed p's notice to its connection", func() bool { return b.pushes("p") > 0 })
	if a.pushes("p") != 0 {
		t.Errorf("A pushed to p, which it does not hold")
	}
	b.MarkSent("ch", "p", ids, time.Now())
	testwait.Until(t, "A sees it sent", func() bool { return states(a.ListPeer("ch", "p", true)) == "hello=sent" })
	if err := b.Ack("ch", "p", res.NoticeID); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "A sees the ack", func() bool { return states(a.ListPeer("ch", "p", true)) == "hello=acked" })
	if a.Count("ch", "p") != 0 || a.Count("ch", "q") != 1 || b.Count("ch", "q") != 1 {
		t.Errorf("counts: p %d on A, q %d on A and %d on B", a.Count("ch", "p"), a.Count("ch", "q"), b.Count("ch", "q"))
	}
	if f, _, _, _ := a.Due("ch", "p", 0, 10, time.Now()); len(f) != 0 {
		t.Errorf("an acked notice is due on A: %q", f)
	}
	if a.metric("termlink_notices_created_total") != 2 || b.metric("termlink_notices_created_total") != 0 || b.metric("termlink_notices_acked_total") != 1 || a.metric("termlink_notices_acked_total") != 0 {
		t.Errorf("counters: created %d on A, %d on B; acked %d on B, %d on A", a.metric("termlink_notices_created_total"), b.metric("termlink_notices_created_total"), b.metric("termlink_notices_acked_total"), a.metric("termlink_notices_acked_total"))
	}
	if v := a.metric("termlink_notices_pending"); v != 1 {
		t.Errorf("pending gauge on A: %d", v)
	}
	// Acking again is nothing; an unknown notice or peer is refused.
	if err := a.Ack("ch", "p", res.NoticeID); err != nil {
		t.Errorf("second ack: %v", err)
	}
	for _, c := range [][2]string{{"p", "n-000000000000000000"}, {"r", res.NoticeID}, {"p", "bad.id"}} {
		if err := a.Ack("ch", c[0], c[1]); !errors.Is(err, notices.ErrUnknownNotice) {
			t.Errorf("ack %v: %v", c, err)
		}
	}
}

// A device that moves: its notice sent (not acked) on A is due again on
// B's new connection (cursor 0), and a node opened later loads it.
func TestNoticesDueAfterMove(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openNoticeNode(t, openNode(t, url, "edge-a"), 10, "p")
	res, err := a.Create("ch", []string{"p"}, noticeSpec("moved", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, ids, _, _ := a.Due("ch", "p", 0, 10, time.Now())
	a.MarkSent("ch", "p", ids, time.Now())
	c := openNoticeNode(t, openNode(t, url, "edge-c"), 10, "p") // opened after: loads the bucket
	testwait.Until(t, "A's write of sent reaches C", func() bool { return states(c.ListPeer("ch", "p", false)) == "moved=sent" })
	if _, ids, _, _ := c.Due("ch", "p", 0, 10, time.Now()); len(ids) != 1 || ids[0] != res.NoticeID {
		t.Fatalf("due on C after the move: %v", ids)
	}
}

// A withdrawal on B takes the notice out of A's mailboxes; a notice past
// expires_at is due nowhere and marked expired in the bucket.
func TestNoticesWithdrawAndExpiry(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openNoticeNode(t, openNode(t, url, "edge-a"), 10)
	b := openNoticeNode(t, openNode(t, url, "edge-b"), 10)
	w, err := a.Create("ch", []string{"p", "q"}, noticeSpec("withdraw me", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "B has it", func() bool { return b.Count("ch", "q") == 1 })
	if n, err := b.Withdraw("ch", w.NoticeID, "q"); n != 1 || err != nil {
		t.Fatalf("withdraw q on B: %d %v", n, err)
	}
	if _, err := b.Withdraw("ch", w.NoticeID, "r"); !errors.Is(err, notices.ErrUnknownNotice) {
		t.Errorf("withdraw from a peer it was not for: %v", err)
	}
	testwait.Until(t, "A sees q's withdrawn", func() bool { return states(a.ListPeer("ch", "q", true)) == "withdraw me=withdrawn" })
	if a.Count("ch", "p") != 1 {
		t.Errorf("p's delivery withdrawn too")
	}
	if n, err := b.Withdraw("ch", w.NoticeID, ""); n != 1 || err != nil {
		t.Fatalf("withdraw all on B: %d %v", n, err)
	}
	testwait.Until(t, "A's p is withdrawn", func() bool { return a.Count("ch", "p") == 0 })

	// Create keeps expires_at in whole seconds: this one ends within a
	// second, maybe before B sees it open, so B is waited for in any state.
	e, err := a.Create("ch", []string{"p"}, noticeSpec("soon", time.Second))
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "B has the short one", func() bool {
		for _, n := range b.ListPeer("ch", "p", true) {
			if n.NoticeID == e.NoticeID {
				return true
			}
		}
		return false
	})
	testwait.Until(t, "the bucket says expired", func() bool {
		data, _ := a.get(t, notices.DeliveryKey("ch", "p", e.NoticeID))
		var v struct{ State string }
		return json.Unmarshal(data, &v) == nil && v.State == notices.Expired
	})
	testwait.Until(t, "B lists it expired", func() bool { return states(b.ListPeer("ch", "p", true)) == "withdraw me=withdrawn,soon=expired" })
	if f, _, _, _ := b.Due("ch", "p", 0, 10, time.Now()); len(f) != 0 {
		t.Errorf("an expired notice is due: %q", f)
	}
	if err := b.Ack("ch", "p", e.NoticeID); err != nil { // acking an expired one changes nothing
		t.Errorf("ack of an expired notice: %v", err)
	}
}

// The per-peer bound holds across nodes (as each sees the bucket): a
// full mailbox refuses the create, a broadcast skips the full peer; an
// ack frees a place; finished deliveries beyond the bound are pruned
// from the bucket.
func TestNoticesBounds(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openNoticeNode(t, openNode(t, url, "edge-a"), 2)
	b := openNoticeNode(t, openNode(t, url, "edge-b"), 2)
	var first string
	for i := range 2 {
		r, err := a.Create("ch", []string{"p"}, noticeSpec("n"+string(rune('0'+i)), time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.NoticeID
		}
	}
	testwait.Until(t, "B sees both", func() bool { return b.Count("ch", "p") == 2 })
	_, err := b.Create("ch", []string{"p"}, noticeSpec("third", time.Hour))
	var full *notices.MailboxFullError
	if !errors.As(err, &full) {
		t.Fatalf("a third notice for a full mailbox on B: %v", err)
	}
	r, err := b.Create("ch", []string{"p", "q"}, noticeSpec("broadcast", time.Hour))
	if err != nil || len(r.Skipped) != 1 || r.Skipped[0] != "p" || len(r.Targets) != 1 {
		t.Fatalf("broadcast with p full: %+v %v", r, err)
	}
	if err := a.Ack("ch", "p", first); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "B sees the ack", func() bool { return b.Count("ch", "p") == 1 })
	// Fill and ack until more than 2 finished would be kept.
	for i := range 4 {
		r, err := b.Create("ch", []string{"p"}, noticeSpec("more"+string(rune('0'+i)), time.Hour))
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if err := b.Ack("ch", "p", r.NoticeID); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = b.Create("ch", []string{"p"}, noticeSpec("last", time.Hour))
	testwait.Until(t, "the first acked delivery pruned from the bucket", func() bool {
		_, rev := a.get(t, notices.DeliveryKey("ch", "p", first))
		return rev == 0
	})
	testwait.Until(t, "A keeps at most 2 finished and 2 open of p", func() bool {
		l := a.ListPeer("ch", "p", true)
		return len(l) <= 4 && a.Count("ch", "p") == 2
	})
}

// The notice API of package notices over the cluster's mailboxes: POST
// on A (to all of the directory), GET on B lists it.
func TestNoticesAPIAcrossNodes(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	a := openNoticeNode(t, openNode(t, url, "edge-a"), 10)
	b := openNoticeNode(t, openNode(t, url, "edge-b"), 10)
	serve := func(s *noticeNode) *httptest.Server {
		mux := http.NewServeMux()
		s.Routes(mux)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv
	}
	sa, sb := serve(a), serve(b)
	resp, err := http.Post(sa.URL+"/api/channels/ch/notices", "application/json", strings.NewReader(`{"text":"to all"}`))
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		IDs     []string `json:"notice_ids"`
		Targets int      `json:"targets"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || created.Targets != 2 {
		t.Fatalf("POST on A: %d %+v", resp.StatusCode, created)
	}
	testwait.Until(t, "GET on B lists it for both peers", func() bool {
		resp, err := http.Get(sb.URL + "/api/channels/ch/notices")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var got struct {
			Notices []notices.Notice `json:"notices"`
		}
		return json.NewDecoder(resp.Body).Decode(&got) == nil && len(got.Notices) == 1 &&
			got.Notices[0].NoticeID == created.IDs[0] && len(got.Notices[0].Peers) == 2
	})
	req, _ := http.NewRequest(http.MethodDelete, sb.URL+"/api/channels/ch/notices/"+created.IDs[0], nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE on B: %d", resp.StatusCode)
	}
	testwait.Until(t, "A has nothing open", func() bool { return len(a.List("ch", false)) == 0 })
}
