package notices

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"termlink/server/wal"
)

func openTestNotices(t *testing.T, dir string, max int) *Service {
	t.Helper()
	ns, err := Open(dir, Options{MaxPerPeer: func(string) int { return max }, Sweep: time.Hour})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return ns
}

// crash stops ns the way kill -9 would leave it: no final snapshot.
func crash(ns *Service) {
	ns.cancel()
	ns.wg.Wait()
	_ = ns.st.(*LocalStorage).wl.Close()
}

func spec(text string) Spec {
	return Spec{Text: text, Priority: "info", DisplaySeconds: 15, ExpiresAt: time.Now().Add(time.Hour), Source: "api"}
}

func ids(list []PeerNotice) (out []string) {
	for _, n := range list {
		out = append(out, n.Text+"="+n.State)
	}
	return out
}

// A snapshot holds every record up to its LSN; records after it are
// replayed from the log. When the log's release mark is lost (it is
// written without fsync), records the snapshot holds are replayed no
// more: a notice pruned before the snapshot does not come back.
func TestNoticeSnapshotAndReplay(t *testing.T) {
	dir := t.TempDir()
	ns := openTestNotices(t, dir, 2)
	create := func(text string) string {
		t.Helper()
		res, err := ns.Create("ch", []string{"p"}, spec(text))
		if err != nil {
			t.Fatalf("create %s: %v", text, err)
		}
		return res.NoticeID
	}
	ack := func(id string) {
		t.Helper()
		if err := ns.Ack("ch", "p", id); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	ack(create("a"))
	ack(create("b"))
	ack(create("c")) // three finished: "a", the oldest finished, is pruned
	create("d")
	if got := ids(ns.ListPeer("ch", "p", true)); len(got) != 3 || got[0] != "b=acked" || got[2] != "d=pending" {
		t.Fatalf("before the snapshot: %v", got)
	}
	if err := ns.st.(*LocalStorage).snapshot(); err != nil {
		t.Fatal(err)
	}
	e := create("e") // after the snapshot: only in the log
	crash(ns)
	if err := os.Remove(filepath.Join(dir, "wal", "released")); err != nil {
		t.Fatal(err)
	}

	ns = openTestNotices(t, dir, 2)
	got := ids(ns.ListPeer("ch", "p", true))
	want := []string{"b=acked", "c=acked", "d=pending", "e=pending"}
	if !slices.Equal(got, want) {
		t.Fatalf("after the crash: %v, want %v", got, want)
	}
	if n := ns.Count("ch", "p"); n != 2 {
		t.Fatalf("Count %d, want 2", n)
	}
	ack(e)
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	ns = openTestNotices(t, dir, 2)
	defer ns.Close()
	if got := ids(ns.ListPeer("ch", "p", false)); len(got) != 1 || got[0] != "d=pending" {
		t.Fatalf("after a clean stop: %v", got)
	}
	// The ack of e pruned b (three finished): its records are gone from
	// the store, not only from the state.
	ls := ns.st.(*LocalStorage)
	ls.waitBuilt() // the map of a snapshot is built in the background
	ls.mu.Lock()
	n := ls.recs.len()
	ls.mu.Unlock()
	if n != 6 {
		t.Fatalf("the store holds %d records, want 6 (c, d and e, and their deliveries to p)", n)
	}
}

// Changed hears of every peer whose open count changed: created, acked,
// withdrawn, expired.
func TestNoticeChangedHook(t *testing.T) {
	var got []string
	ns, err := Open(t.TempDir(), Options{Sweep: time.Hour, Changed: func(ch, p string) { got = append(got, p) }})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	sp := spec("x")
	res, err := ns.Create("ch", []string{"p", "q", "r"}, sp)
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Ack("ch", "p", res.NoticeID); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Withdraw("ch", res.NoticeID, "q"); err != nil {
		t.Fatal(err)
	}
	ns.Sweep(sp.ExpiresAt.Add(time.Second))
	if want := []string{"p", "q", "r", "p", "q", "r"}; !slices.Equal(got, want) {
		t.Fatalf("changed %v, want %v", got, want)
	}
}

// A workspace written before the rules moved above Storage (notices and
// their peers by state in snapshot.json, operations in the log) opens
// with everything it held; the first snapshot replaces the old one.
func TestNoticeLegacyWorkspace(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC().Truncate(time.Millisecond)
	exp := now.Add(time.Hour).Truncate(time.Second)
	js := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	snap := map[string]any{"lsn": 1, "seq": 1, "notices": []any{map[string]any{
		"op": "create", "ch": "ch", "id": "n-000000000000000001", "seq": 1, "text": "old", "priority": "info",
		"display": 15, "source": "api", "created": now, "expires": exp,
		"open": []string{"p"}, "acked": []any{map[string]any{"p": "q", "at": now.UnixMilli()}}, "withdrawn": []string{"r"}}}}
	if err := os.WriteFile(filepath.Join(dir, "snapshot.json"), js(snap), 0o644); err != nil {
		t.Fatal(err)
	}
	wl, err := wal.Open(filepath.Join(dir, "wal"), wal.Options{NoSync: true}, func(wal.LSN, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []map[string]any{
		{"op": "create", "ch": "ch", "id": "n-000000000000000000", "text": "in the snapshot already"}, // LSN 1: skipped
		{"op": "create", "ch": "ch", "id": "n-000000000000000002", "peers": []string{"p", "q"}, "seq": 2, "text": "logged",
			"priority": "alert", "display": 5, "source": "agent", "created": now, "expires": exp},
		{"op": "ack", "ch": "ch", "id": "n-000000000000000002", "peers": []string{"q"}, "at": now},
		{"op": "withdraw", "ch": "ch", "id": "n-000000000000000001", "peers": []string{"p"}},
	} {
		if _, err := wl.Append(context.Background(), js(r)); err != nil {
			t.Fatal(err)
		}
	}
	if err := wl.Close(); err != nil {
		t.Fatal(err)
	}
	ns := openTestNotices(t, dir, 10)
	check := func(ns *Service) {
		t.Helper()
		if got := ids(ns.ListPeer("ch", "p", true)); !slices.Equal(got, []string{"old=withdrawn", "logged=pending"}) {
			t.Fatalf("p: %v", got)
		}
		if got := ids(ns.ListPeer("ch", "q", true)); !slices.Equal(got, []string{"old=acked", "logged=acked"}) {
			t.Fatalf("q: %v", got)
		}
		if got := ids(ns.ListPeer("ch", "r", true)); !slices.Equal(got, []string{"old=withdrawn"}) {
			t.Fatalf("r: %v", got)
		}
		l := ns.ListPeer("ch", "p", false)
		if len(l) != 1 || l[0].Priority != "alert" || l[0].Source != "agent" || !l[0].ExpiresAt.Equal(exp) || l[0].NoticeID != "n-000000000000000002" {
			t.Fatalf("p's open notice: %+v", l)
		}
	}
	check(ns)
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshot.json")); !os.IsNotExist(err) {
		t.Fatalf("the old snapshot is still there: %v", err)
	}
	ns = openTestNotices(t, dir, 10)
	defer ns.Close()
	check(ns)
}

// A snapshot that does not read is refused at open, naming the file, the
// line and what to do; nothing is half loaded.
func TestBadSnapshotRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ns := openTestNotices(t, dir, 10)
	if _, err := ns.Create("ch", []string{"p1", "p2"}, spec("hello")); err != nil {
		t.Fatal(err)
	}
	if err := ns.Close(); err != nil { // writes records.snap
		t.Fatal(err)
	}
	snap := filepath.Join(dir, localSnapshotFile)
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n != 4 { // the header, a notice, two deliveries
		t.Fatalf("records.snap has %d lines, want 4:\n%s", n, data)
	}
	if err := os.WriteFile(snap, append(data, "not a record\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{Sweep: time.Hour})
	if err == nil || !strings.Contains(err.Error(), snap) || !strings.Contains(err.Error(), "line 5: not a record") ||
		!strings.Contains(err.Error(), "move it away") {
		t.Fatalf("open of a bad snapshot: %v", err)
	}
	// Taken back whole once the line goes.
	if err := os.WriteFile(snap, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ns = openTestNotices(t, dir, 10)
	defer ns.Close()
	if n := ns.Count("ch", "p2"); n != 1 {
		t.Fatalf("p2 has %d notices after the snapshot was mended, want 1", n)
	}
}

// A local load feeds the notices first, oldest first, then each notice's
// deliveries, then any other record, each group in revision order
// (revisions past 2^33 take the radix sort through several passes).
func TestLocalLoadOrder(t *testing.T) {
	big := uint64(1) << 40
	recs := []loadItem{
		{key: "d.Y2g.cDE.n-b", rev: big + 9},
		{key: "m.Y2g.cDE", rev: 3},
		{key: "n.n-b", rev: big + 2},
		{key: "d.Y2g.cDI.n-a", rev: 5},
		{key: "d.Y2g.cDE.n-a", rev: big + 7},
		{key: "n.n-a", rev: 1},
		{key: "d.Y2g.cDE.n-gone", rev: 4},
		{key: "d.Y2g.cDI.n-b", rev: big + 3},
		{key: "x", rev: 1 << 63},
	}
	var got []string
	recs = sortByRev(recs)
	for _, i := range loadOrder(recs) {
		got = append(got, recs[i].key)
	}
	want := []string{"n.n-a", "n.n-b", "d.Y2g.cDI.n-a", "d.Y2g.cDE.n-a", "d.Y2g.cDI.n-b", "d.Y2g.cDE.n-b",
		"m.Y2g.cDE", "d.Y2g.cDE.n-gone", "x"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("order %v\nwant  %v", got, want)
	}
}

// records.snap's reader takes back a snapshot whose keys span many of
// its 64 KB strings, and a key longer than one.
func TestLocalSnapshotManyKeys(t *testing.T) {
	var recs []localRecord
	for i := range 5000 {
		recs = append(recs, localRecord{Key: DeliveryKey("ch", fmt.Sprintf("kiosk-%05d", i), "n-1"), Value: json.RawMessage(`{"state":"pending"}`), Rev: uint64(i + 1)})
	}
	recs = append(recs, localRecord{Key: "x." + strings.Repeat("k", 100<<10), Value: json.RawMessage(`{}`), Rev: 5001})
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := writeSnapshot(w, localSnapshotHeader{Format: 1, Rev: 5001, Records: len(recs)}, recs); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	_, read, inOrder, err := readSnapshot(bufio.NewReader(&buf))
	if err != nil || !inOrder {
		t.Fatal(err, inOrder)
	}
	ls := &LocalStorage{recs: newLocalRecs(0), built: make(chan struct{})}
	ls.buildIndex(read)
	if ls.recs.len() != len(recs) {
		t.Fatalf("%d records read, want %d", ls.recs.len(), len(recs))
	}
	for _, r := range recs {
		if e, ok := ls.recs.get(r.Key); !ok || e.Rev != r.Rev || !bytes.Equal(e.Value, r.Value) {
			t.Fatalf("record %.40q read as %+v", r.Key, e)
		}
	}
}

// A records.snap that names a key twice (not one this termserver
// writes) loads as the newest of the two, whether its lines are in
// revision order (fed as read, the map built meanwhile) or not (fed from
// the map).
func TestLocalSnapshotKeyTwice(t *testing.T) {
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	nv := string(mustJSON(noticeValue{Channel: "ch", Content: Content{NoticeID: "n-1", Text: "hi", Priority: "info", DisplaySeconds: 5, ExpiresAt: exp}}))
	pending := string(mustJSON(deliveryValue{State: Pending, Expires: exp}))
	acked := string(mustJSON(deliveryValue{State: Acked, Expires: exp}))
	for name, lines := range map[string][]string{
		"in order": {"1\tn.n-1\t" + nv, "2\t" + DeliveryKey("ch", "p", "n-1") + "\t" + pending, "3\t" + DeliveryKey("ch", "p", "n-1") + "\t" + acked},
		"unsorted": {"3\t" + DeliveryKey("ch", "p", "n-1") + "\t" + acked, "1\tn.n-1\t" + nv, "2\t" + DeliveryKey("ch", "p", "n-1") + "\t" + pending},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			data := `{"format":1,"lsn":0,"rev":3,"records":3}` + "\n" + strings.Join(lines, "\n") + "\n"
			if err := os.WriteFile(filepath.Join(dir, localSnapshotFile), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			ns := openTestNotices(t, dir, 10)
			defer ns.Close()
			if got := ids(ns.ListPeer("ch", "p", true)); len(got) != 1 || got[0] != "hi=acked" {
				t.Fatalf("loaded %v, want [hi=acked]", got)
			}
			if n := ns.Count("ch", "p"); n != 0 {
				t.Fatalf("count %d", n)
			}
		})
	}
}
