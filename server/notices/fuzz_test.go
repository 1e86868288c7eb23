package notices

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
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
		ls := &LocalStorage{recs: map[string]localEntry{}}
		ls.take(read)
		if inOrder && len(read) > 0 {
			// What the background build makes is what take makes.
			bg := &LocalStorage{built: make(chan struct{})}
			bg.buildMap(read)
			if len(bg.recs) != len(ls.recs) {
				t.Fatalf("built %d records, taken %d", len(bg.recs), len(ls.recs))
			}
			for k, r := range ls.recs {
				if a, ok := bg.recs[k]; !ok || a.Rev != r.Rev || !bytes.Equal(a.Value, r.Value) {
					t.Fatalf("record %q built as %+v, taken as %+v", k, a, r)
				}
			}
		}
		// What was read is written back and read again the same.
		recs := make([]localRecord, 0, len(ls.recs))
		for k, e := range ls.recs {
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
		again := &LocalStorage{recs: map[string]localEntry{}}
		again.take(back)
		if len(again.recs) != len(ls.recs) {
			t.Fatalf("%d records read back, want %d", len(again.recs), len(ls.recs))
		}
		for k, r := range ls.recs {
			if a, ok := again.recs[k]; !ok || a.Rev != r.Rev || !bytes.Equal(a.Value, r.Value) {
				t.Fatalf("record %q read back as %+v, want %+v", k, a, r)
			}
		}
	})
}
