package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"termlink/internal/testwait"
	"termlink/link"
	"termlink/server/session"
	"termlink/testrig/cluster"
)

// slowAgent is a plain Terminal Protocol v1 agent (a shell command) that
// appends "<workspace> <text>" to runLog when a run starts, works for
// delay, and answers "You said: <text>". The run log counts the agent's
// runs across every worker (they share this machine), whatever the
// servers record.
func slowAgent(runLog string, delay time.Duration) cluster.Agent {
	return cluster.Agent{
		Command: fmt.Sprintf(`echo "$(pwd)" {message} >> %s; sleep %.1f; printf 'You said: %%s' {message}`,
			runLog, delay.Seconds()),
		Protocol:       "plain",
		TimeoutSeconds: 60,
	}
}

// runStarts reads the run log: text -> runs started, and the lines.
func runStarts(t *testing.T, runLog string) (map[string]int, []string) {
	t.Helper()
	f, err := os.Open(runLog)
	if os.IsNotExist(err) {
		return map[string]int{}, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := map[string]int{}
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if _, text, ok := strings.Cut(sc.Text(), " "); ok {
			n[text]++
		}
	}
	return n, lines
}

// checkReruns fails the test unless every message of the devices ran
// once, or twice with its interruption recorded in the history (a
// system record with event run_interrupted, once): the run of a worker
// that died, or lost its partition, runs again once. It returns how many
// ran twice.
func checkReruns(t *testing.T, tc *testCluster, runLog string, ds ...*device) (rerun int) {
	t.Helper()
	starts, _ := runStarts(t, runLog)
	inter := interruptions(t, tc)
	for _, d := range ds {
		d.mu.Lock()
		for _, id := range d.sentIDs {
			text := d.texts[id]
			ni := inter[fmt.Sprintf("terminal-dev:local:%s/%s", d.peer, id)]
			switch n := starts[text]; {
			case n > 2:
				t.Errorf("message %q ran %d times, want at most 2 (one re-run)", text, n)
			case n == 2:
				rerun++
				if ni != 1 {
					t.Errorf("message %q ran twice, and the history records %d interruptions, want 1", text, ni)
				}
			case ni > 1:
				t.Errorf("message %q: %d interruptions recorded, want at most 1", text, ni)
			}
		}
		d.mu.Unlock()
	}
	return rerun
}

// checkRanOnce fails the test unless the agent ran once per message
// (counted from the run log).
func checkRanOnce(t *testing.T, runLog string) {
	t.Helper()
	starts, _ := runStarts(t, runLog)
	for text, n := range starts {
		if n != 1 {
			t.Errorf("message %q ran %d times, want 1", text, n)
		}
	}
}

// closeAndCheck stops every device's client and checks its answers
// (device.check).
func closeAndCheck(inOrder bool, ds ...*device) {
	for _, d := range ds {
		d.close()
		d.check(inOrder)
	}
}

// sessionRecords returns the history of one session, each record once
// (by role, message id and event, as the export reads it), in stream
// order.
func sessionRecords(t *testing.T, tc *testCluster, sessionKey string) []histRecord {
	t.Helper()
	seen := map[string]bool{}
	var out []histRecord
	for _, r := range readHistory(t, tc.nats.URLs()) {
		if r.Session != sessionKey {
			continue
		}
		ev, _ := r.Record.Extra["event"].(string)
		k := r.Record.Role + "\x00" + r.Record.MessageID + "\x00" + ev
		if !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out
}

// interruptions counts the run_interrupted records per message id in the
// whole history (every copy: a record written twice counts twice).
func interruptions(t *testing.T, tc *testCluster) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, r := range readHistory(t, tc.nats.URLs()) {
		if ev, _ := r.Record.Extra["event"].(string); r.Record.Role == "system" && ev == "run_interrupted" {
			n[r.Session+"/"+r.Record.MessageID]++
		}
	}
	return n
}

// The device talks through edge A, moves to edge B mid-conversation
// (messages still queued and running) and keeps its session (same
// session id), its history (every message and reply recorded once, in
// order) and its order (replies in send order).
func TestMoveEdgeMidConversation(t *testing.T) {
	cluster.Heavy(t)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	tc := startCluster(t, clusterOpts{edges: 2, workers: 2, agent: slowAgent(runLog, 300*time.Millisecond)})
	// The partitions settled between the two workers first: a handover
	// while the first messages run records one as cut short (a system
	// record in the history), as it must (stress run 33, under load the
	// second worker joined during the first burst). This test is about
	// the edge's move.
	testwait.UntilOK(t, "each worker owns partitions, none given up", func() error {
		if _, err := settledConsumers(tc.workers, 8); err != nil {
			return err
		}
		for _, s := range tc.workers {
			st, err := cluster.ClusterStatus(context.Background(), s.HTTPURL())
			if err != nil {
				return err
			}
			if len(st.Owned) == 0 {
				return fmt.Errorf("%s owns no partition yet", s.Spec.Name)
			}
		}
		return nil
	})
	d := newDevice(t, "mover-1", tc.edges[0].WSURL())
	for i := range 3 {
		d.send(fmt.Sprintf("a%d", i))
	}
	d.waitReplies(waitFor)
	for i := range 4 { // mid-conversation: one runs, three wait
		d.send(fmt.Sprintf("b%d", i))
	}
	d.waitAcked(waitFor)
	d.connect(tc.edges[1].WSURL())
	for i := range 3 {
		d.send(fmt.Sprintf("c%d", i))
	}
	d.waitReplies(waitFor)
	d.close()
	d.check(true)

	d.mu.Lock()
	sessions := d.sessions
	ids := append([]string(nil), d.sentIDs...)
	d.mu.Unlock()
	if len(sessions) != 1 {
		t.Fatalf("session ids seen: %v, want one", sessions)
	}
	var key string
	for k := range sessions {
		key = k
	}
	recs := sessionRecords(t, tc, key)
	var got []string
	for _, r := range recs {
		got = append(got, r.Record.Role+" "+r.Record.MessageID)
	}
	var want []string
	for _, id := range ids {
		want = append(want, "user "+id, "assistant "+id)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("history of %s:\n%s\nwant:\n%s", key, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The same history as nanobot JSONL (termserver export-sessions).
	exp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := tc.workers[0].ExportSessions(ctx, exp); err != nil {
		t.Fatal(err)
	}
	store, err := session.Open(exp, session.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sess, err := store.Load(key)
	if err != nil {
		t.Fatalf("exported session %s: %v", key, err)
	}
	got = got[:0]
	for _, r := range sess.Records {
		got = append(got, r.Role+" "+r.MessageID)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("exported session %s:\n%s\nwant:\n%s", key, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	checkRanOnce(t, runLog)
}

// kill -9 of a worker during runs: every message is answered, no reply
// reaches a device twice, and each interrupted run runs again at most
// once, recorded in the history (a system record with event
// run_interrupted).
func TestKillWorkerDuringRuns(t *testing.T) {
	cluster.Heavy(t)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	tc := startCluster(t, clusterOpts{edges: 1, workers: 2, failover: true, agent: slowAgent(runLog, 2*time.Second)})
	const devices, perDevice = 8, 2
	var ds []*device
	for i := range devices {
		d := newDevice(t, fmt.Sprintf("kw-%d", i), tc.edges[0].WSURL())
		for j := range perDevice {
			d.send(fmt.Sprintf("kw-%d-%d", i, j))
		}
		ds = append(ds, d)
	}
	// Kill worker-1 while it runs an agent (its workspace is in the run
	// log's line; a run lasts 2 s).
	victim := tc.workers[0]
	ws := filepath.Join(victim.Spec.Dir, "workspace")
	var killedDuring []string
	testwait.UntilOK(t, "a run started by worker-1", func() error {
		_, lines := runStarts(t, runLog)
		for _, l := range lines {
			if w, text, _ := strings.Cut(l, " "); w == ws {
				killedDuring = append(killedDuring, text)
			}
		}
		if killedDuring == nil {
			return fmt.Errorf("run log %q", lines)
		}
		return nil
	})
	victim.Kill()
	t.Logf("killed %s during the runs of %v", victim.Spec.Name, killedDuring)

	for _, d := range ds {
		d.waitReplies(waitFor)
	}
	var dupes int64
	for _, d := range ds {
		d.close()
		d.check(true)
		dupes += d.dupes
	}
	if dupes != 0 {
		t.Errorf("%d replies reached a device for a message it had its answer to already", dupes)
	}
	rerun := checkReruns(t, tc, runLog, ds...)
	checkHistory(t, tc, ds...)
	if rerun == 0 {
		t.Errorf("no run ran again after the kill (killed during %v): the kill interrupted nothing", killedDuring)
	}
}

// kill -9 of an edge: its devices, which have both edges' URLs
// (link.ClientConfig.Fallbacks), reconnect to the other edge, and
// nothing is lost: every message answered exactly once, in order, run
// once, recorded once.
func TestKillEdge(t *testing.T) {
	cluster.Heavy(t)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	tc := startCluster(t, clusterOpts{edges: 2, workers: 2, agent: slowAgent(runLog, 200*time.Millisecond)})
	var ds []*device
	for i := range 6 {
		ds = append(ds, newDevice(t, fmt.Sprintf("ke-%d", i), tc.edges[i%2].WSURL(), tc.edges[(i+1)%2].WSURL()))
	}
	for round := range 3 {
		for i, d := range ds {
			d.send(fmt.Sprintf("ke-%d-%d", i, round))
		}
	}
	sessions := make([]int, len(ds))
	for i, d := range ds {
		d.waitAcked(waitFor) // some still run when the edge dies
		sessions[i] = d.connected()
	}
	tc.edges[0].Kill()
	for i, d := range ds {
		if i%2 == 0 {
			d.waitReconnected(sessions[i], waitFor)
		}
	}
	for round := 3; round < 6; round++ { // answered only through edge-2
		for i, d := range ds {
			d.send(fmt.Sprintf("ke-%d-%d", i, round))
		}
	}
	for _, d := range ds {
		d.waitReplies(waitFor)
	}
	closeAndCheck(true, ds...)
	checkHistory(t, tc, ds...)
	checkRanOnce(t, runLog)
}

// One NATS node killed and restarted while devices send: nothing lost
// (every message answered exactly once and recorded, run in the order
// accepted), nothing run twice unless its interruption is recorded.
func TestNATSNodeRestartUnderLoad(t *testing.T) {
	cluster.Heavy(t)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	tc := startCluster(t, clusterOpts{edges: 2, workers: 2, failover: true, agent: slowAgent(runLog, 0)})
	var ds []*device
	for i := range 4 {
		ds = append(ds, newDevice(t, fmt.Sprintf("nr-%d", i), tc.edges[i%2].WSURL()))
	}
	node := tc.nats.Nodes[0]
	const rounds = 24
	for round := range rounds {
		switch round {
		case rounds / 3:
			node.Kill()
			t.Logf("killed nats %s", node.Name)
		case 2 * rounds / 3:
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			if err := node.Start(ctx); err != nil {
				cancel()
				t.Fatal(err)
			}
			cancel()
			t.Logf("restarted nats %s", node.Name)
		}
		for i, d := range ds {
			d.send(fmt.Sprintf("nr-%d-%d", i, round))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, d := range ds {
		d.waitReplies(waitFor)
	}
	// The replies need not come in send order: a message the edge
	// could not store while JetStream elected new leaders is refused
	// (code unavailable) and accepted after the ones behind it, and a
	// reply published while an edge reconnected to NATS reaches the
	// device later, from the claim. The messages must have RUN in the
	// order they were accepted (checkHistory).
	closeAndCheck(false, ds...)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := tc.nats.WaitReady(ctx); err != nil {
		t.Error(err)
	}
	checkHistory(t, tc, ds...)
	// A worker whose NATS node died can lose its partitions' leases:
	// its runs then run again once on the new owner, recorded.
	if n := checkReruns(t, tc, runLog, ds...); n > 0 {
		t.Logf("%d messages ran again after a partition moved", n)
	}
}

// Dedupe outlives JetStream's duplicate window: a device that got its
// reply, went offline longer than the window and resends the message
// (same message_id) gets the cached reply (ack duplicate with reply) and
// the agent does not run again.
func TestDedupeBeyondDuplicateWindow(t *testing.T) {
	cluster.Heavy(t)
	runLog := filepath.Join(t.TempDir(), "runs.log")
	const window = 1 * time.Second
	tc := startCluster(t, clusterOpts{edges: 1, workers: 1, agent: slowAgent(runLog, 0),
		cluster: map[string]any{"duplicateWindowSeconds": int(window / time.Second)}})
	url := tc.edges[0].WSURL()

	first := exchange(t, url, "dd-1", "m-0001", "only once")
	if first.reply == nil || first.reply.Text != "You said: only once" {
		t.Fatalf("first send: reply %+v, want the agent's answer", first.reply)
	}
	time.Sleep(3 * window) // offline past the stream's duplicate window
	again := exchange(t, url, "dd-1", "m-0001", "only once")
	if again.ack == nil || !again.ack.Duplicate || again.ack.Reply == nil {
		t.Fatalf("resend after the window: ack %+v, want duplicate with the cached reply", again.ack)
	}
	if again.ack.Reply.Text != first.reply.Text || again.ack.Reply.RunID != first.reply.RunID {
		t.Errorf("cached reply %+v, want the first one %+v", again.ack.Reply, first.reply)
	}
	starts, lines := runStarts(t, runLog)
	if starts["only once"] != 1 {
		t.Errorf("the agent ran %d times (run log %q), want 1", starts["only once"], lines)
	}
}

// exchanged is what one raw connection got for one message.
type exchanged struct {
	ack   *link.Ack
	reply *link.Message // a reply frame, or the ack's cached reply
}

// exchange connects as peer with raw frames (the channel spec), sends
// one message and reads until its final answer (a reply frame, or an ack
// carrying the cached reply), then closes.
func exchange(t *testing.T, url, peer, messageID, text string) exchanged {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: waitFor}
	ws, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	write := func(f link.Frame) {
		_ = ws.SetWriteDeadline(time.Now().Add(waitFor))
		if err := ws.WriteMessage(websocket.TextMessage, link.MustEncode(f)); err != nil {
			t.Fatal(err)
		}
	}
	write(&link.Connect{PeerID: peer})
	write(&link.Message{MessageID: messageID, Text: text})
	var out exchanged
	_ = ws.SetReadDeadline(time.Now().Add(waitFor))
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("reading the answer to %s: %v (got %+v)", messageID, err, out)
		}
		f, err := link.Decode(data)
		if err != nil {
			t.Fatalf("frame %s: %v", data, err)
		}
		switch f := f.(type) {
		case *link.Ack:
			if f.MessageID == messageID {
				out.ack = f
				if f.Reply != nil {
					out.reply = f.Reply
					return out
				}
			}
		case *link.Message:
			if f.MessageID == messageID {
				out.reply = f
				return out
			}
		case *link.Error:
			t.Fatalf("error frame: %+v", f)
		}
	}
}

// checkHistory fails the test unless the session history in JetStream
// has, for every device, one session (the session id the device saw)
// whose user records are the device's messages in the order they were
// accepted (first acked; send order when none was refused for a while),
// each with its assistant record (the reply the device got) after it.
func checkHistory(t *testing.T, tc *testCluster, ds ...*device) {
	t.Helper()
	all := readHistory(t, tc.nats.URLs())
	for _, d := range ds {
		d.mu.Lock()
		var key string
		for k := range d.sessions {
			key = k
		}
		if len(d.sessions) != 1 {
			t.Errorf("device %s saw session ids %v, want one", d.peer, d.sessions)
		}
		ids := append([]string(nil), d.ackOrder...)
		if len(ids) != len(d.sentIDs) {
			t.Errorf("device %s: %d of %d messages acked", d.peer, len(ids), len(d.sentIDs))
		}
		replies := map[string]string{}
		for id, r := range d.replies {
			replies[id] = r
		}
		d.mu.Unlock()
		var users []string
		seenUser := map[string]bool{}
		answered := map[string]string{}
		for _, r := range all {
			if r.Session != key {
				continue
			}
			switch id := r.Record.MessageID; r.Record.Role {
			case "user":
				if !seenUser[id] {
					seenUser[id] = true
					users = append(users, id)
				}
			case "assistant":
				if !seenUser[id] {
					t.Errorf("session %s: the reply to %s is recorded before the message", key, id)
				}
				answered[id] = r.Record.Content
			}
		}
		if strings.Join(users, " ") != strings.Join(ids, " ") {
			t.Errorf("session %s: user records %v, want the messages in the order accepted %v", key, users, ids)
		}
		for _, id := range ids {
			if got, ok := answered[id]; !ok || got != replies[id] {
				t.Errorf("session %s: the reply to %s recorded as %q (recorded: %v), the device got %q", key, id, got, ok, replies[id])
			}
		}
	}
}
