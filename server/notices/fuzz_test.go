package notices

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"termlink/link"
)

// FuzzParseNoticeRequest: any body gets a notice request within every
// bound or an error, never a panic.
func FuzzParseNoticeRequest(f *testing.F) {
	for _, s := range []string{
		`{"text":"hello"}`,
		`{"text":"a","priority":"alert","display_seconds":30,"ttl_seconds":60}`,
		`{"text":"a","expires_at":"2026-11-24T00:00:00Z"}`,
		`{"text":"a","peers":["k1","k2"]}`,
		`{"text":"a","tags":{"site":"lobby"}}`,
		`{"text":"a","display_seconds":"5"}`,
		`{"text":null}`, `[]`, `null`, `{"text":"a"} x`, `{"text":"\u00e9\ud800"}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte, broadcast bool) {
		req, err := parseNoticeRequest(body, broadcast, now)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		sp := req.spec
		switch {
		case strings.TrimSpace(sp.Text) == "" || utf8.RuneCountInString(sp.Text) > MaxTextChars:
			t.Fatalf("text %q accepted", sp.Text)
		case sp.Priority != link.PriorityInfo && sp.Priority != link.PriorityAlert:
			t.Fatalf("priority %q accepted", sp.Priority)
		case sp.DisplaySeconds < 1 || sp.DisplaySeconds > maxDisplaySeconds:
			t.Fatalf("display_seconds %d accepted", sp.DisplaySeconds)
		case !sp.ExpiresAt.After(now) || sp.ExpiresAt.Sub(now) > maxNoticeTTL:
			t.Fatalf("expiry %v accepted", sp.ExpiresAt)
		case !broadcast && (req.peers != nil || req.tags != nil):
			t.Fatal("a selector accepted on the peer route")
		case req.peers != nil && req.tags != nil:
			t.Fatal("both selectors accepted")
		}
		for _, p := range req.peers {
			if !peerIDRE.MatchString(p) {
				t.Fatalf("peer %q accepted", p)
			}
		}
	})
}

// A delivery's key names its channel, peer and notice again, for any
// channel and peer; any other key is refused, never misread.
func FuzzDeliveryKey(f *testing.F) {
	f.Add("terminal-dev", "kiosk.1@lobby", "n-0123456789abcdef01")
	f.Add("", "p", "bad.id")
	f.Fuzz(func(t *testing.T, ch, peer, id string) {
		key := DeliveryKey(ch, peer, id)
		c, p, i, ok := ParseDeliveryKey(key)
		if ok != ValidID(id) {
			t.Fatalf("key %q: ok %v for id %q", key, ok, id)
		}
		if ok && (c != ch || p != peer || i != id) {
			t.Fatalf("key %q read as %q %q %q", key, c, p, i)
		}
		_, _, _, _ = ParseDeliveryKey(ch + "." + peer + "." + id) // no panic
	})
}

// records.snap's reader takes back what its writer wrote, and refuses
// anything else with an error, never a panic.
func FuzzReadSnapshot(f *testing.F) {
	var good bytes.Buffer
	w := bufio.NewWriter(&good)
	if err := writeSnapshot(w, localSnapshotHeader{Format: 1, LSN: 7, Rev: 3, Records: 3}, []localRecord{
		{Key: "n.n-1", Value: json.RawMessage(`{"a":1}`), Rev: 1},
		{Key: "d.Y2g.cDE.n-1", Value: json.RawMessage(`{"state":"pending"}`), Rev: 2},
		{Key: "d.Y2g.cDI.n-1", Value: json.RawMessage(`{"state":"pending"}`), Rev: 3},
	}); err != nil {
		f.Fatal(err)
	}
	w.Flush()
	f.Add(good.Bytes())
	f.Add([]byte("{\"format\":1}\n=\n"))
	f.Add([]byte("{\"format\":1}\n1\tk\t=\n"))
	f.Add([]byte("{\"format\":2}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, read, inOrder, err := readSnapshot(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			if !strings.Contains(err.Error(), "line ") && !strings.Contains(err.Error(), "header") && !strings.Contains(err.Error(), "format") {
				t.Fatalf("an error that names no line: %v", err)
			}
			return
		}
		for i := 1; i < len(read); i++ {
			if inOrder && read[i].rev <= read[i-1].rev {
				t.Fatalf("in order, but revision %d after %d", read[i].rev, read[i-1].rev)
			}
		}
		ls := &LocalStorage{recs: newLocalRecs(0)}
		ls.take(read)
		taken := records(ls)
		if inOrder && len(read) > 0 {
			// What the background build makes is what take makes, and
			// stays so through writes and deletions of its records.
			bg := &LocalStorage{recs: newLocalRecs(0), built: make(chan struct{})}
			bg.buildIndex(read)
			sameRecords(t, "built", records(bg), taken)
			for i, k := range slices.Sorted(maps.Keys(taken)) {
				e := localEntry{Value: json.RawMessage(`{}`), Rev: uint64(1000 + i)}
				switch i % 3 {
				case 0:
					bg.recs.set(k, e)
					ls.recs.set(k, e)
				case 1:
					bg.recs.del(k)
					ls.recs.del(k)
				}
			}
			sameRecords(t, "changed", records(bg), records(ls))
			bg.recs.compact()
			sameRecords(t, "compacted", records(bg), records(ls))
			if bg.recs.len() != ls.recs.len() {
				t.Fatalf("%d records, want %d", bg.recs.len(), ls.recs.len())
			}
			ls.recs.del("no such key")
		}
		recs := make([]localRecord, 0, len(taken))
		for k, e := range taken {
			recs = append(recs, localRecord{Key: k, Value: e.Value, Rev: e.Rev})
		}
		slices.SortFunc(recs, func(a, b localRecord) int { return cmp.Compare(a.Rev, b.Rev) })
		var out bytes.Buffer
		bw := bufio.NewWriter(&out)
		if err := writeSnapshot(bw, h, recs); err != nil {
			return // a key with a tab in it can be read from a line, not written
		}
		bw.Flush()
		_, back, _, err := readSnapshot(bufio.NewReader(&out))
		if err != nil {
			t.Fatalf("a snapshot written from %q does not read back: %v", data, err)
		}
		again := &LocalStorage{recs: newLocalRecs(0)}
		again.take(back)
		sameRecords(t, "read back", records(again), taken)
	})
}

// records is every record of ls's store.
func records(ls *LocalStorage) map[string]localEntry {
	m := map[string]localEntry{}
	ls.recs.each(func(k string, e localEntry) {
		if _, ok := m[k]; ok {
			panic("key " + k + " twice")
		}
		m[k] = e
	})
	if len(m) != ls.recs.len() {
		panic("len differs from each")
	}
	for k, e := range m {
		if g, ok := ls.recs.get(k); !ok || g.Rev != e.Rev || !bytes.Equal(g.Value, e.Value) {
			panic("get differs from each: " + k)
		}
	}
	return m
}

func sameRecords(t *testing.T, what string, got, want map[string]localEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g.Rev != w.Rev || !bytes.Equal(g.Value, w.Value) {
			t.Fatalf("%s: record %q is %+v, want %+v", what, k, g, w)
		}
	}
}
