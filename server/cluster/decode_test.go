package cluster

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"termlink/server/bus"
	"termlink/server/session"
)

func TestDecodeRefusesWhatNamesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  func([]byte) error
		in   string
		want string
	}{
		{"in", func(b []byte) error { _, err := decodeIn(b); return err }, `{`, "not JSON"},
		{"in", func(b []byte) error { _, err := decodeIn(b); return err }, `{"ChannelID":"c","PeerID":"p","SessionKey":"c:a:p"}`, "without a message_id"},
		{"in", func(b []byte) error { _, err := decodeIn(b); return err }, `{"PeerID":"p"}`, "without a channel"},
		{"out", func(b []byte) error { _, err := decodeOut(b); return err }, `{"channel":"c","peer":"p","message_id":"m","kind":7}`, "unknown kind 7"},
		{"out", func(b []byte) error { _, err := decodeOut(b); return err }, `{"channel":"c","message_id":"m"}`, "without a channel or peer"},
		{"claim", func(b []byte) error { _, err := decodeClaim(b); return err }, `{"state":"done","session":"s","message_id":"m"}`, "done without a reply"},
		{"claim", func(b []byte) error { _, err := decodeClaim(b); return err }, `{"state":"lost","session":"s","message_id":"m"}`, `unknown state "lost"`},
		{"claim", func(b []byte) error { _, err := decodeClaim(b); return err }, `[]`, "not JSON"},
		{"hist", func(b []byte) error { _, err := decodeHist(b); return err }, `{"session":"s","records":[]}`, "without a session or records"},
	} {
		err := tc.err([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: error %v, want it to say %q", tc.name, tc.in, err, tc.want)
		}
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	in := inMsg{Inbound: bus.Inbound{ChannelID: "c", PeerID: "p", SessionKey: "c:a:p", MessageID: "m1", Text: "hi"}}
	b, _ := json.Marshal(in)
	got, err := decodeIn(b)
	if err != nil || got.Text != "hi" || got.MessageID != "m1" {
		t.Fatalf("decodeIn(%s) = %+v, %v", b, got, err)
	}
	c := Claim{State: StateDone, Session: "c:a:p", MessageID: "m1", Reply: &Reply{Text: "ok", FinishReason: "stop"}}
	b, _ = json.Marshal(c)
	if got, err := decodeClaim(b); err != nil || got.Reply.Text != "ok" {
		t.Fatalf("decodeClaim(%s) = %+v, %v", b, got, err)
	}
	// A delta (reply text streamed so far) crosses to the peer's edge
	// with its kind: it goes where progress goes.
	o := outMsg{Kind: bus.Delta, ChannelID: "c", PeerID: "p", SessionKey: "c:a:p", MessageID: "m1", Text: "Hel"}
	b, _ = json.Marshal(o)
	if got, err := decodeOut(b); err != nil || got.Kind != bus.Delta || got.Text != "Hel" {
		t.Fatalf("decodeOut(%s) = %+v, %v", b, got, err)
	}
	h := histEntry{Session: "c:a:p", Records: []session.Record{{Role: "user", Content: "hi", MessageID: "m1"}}}
	b, _ = json.Marshal(h)
	if got, err := decodeHist(b); err != nil || got.Records[0].Content != "hi" {
		t.Fatalf("decodeHist(%s) = %+v, %v", b, got, err)
	}
}

func TestPartitionAndKeys(t *testing.T) {
	t.Parallel()
	counts := make([]int, 16)
	for i := range 16000 {
		counts[Partition("terminal-dev:local:kiosk-"+strconv.Itoa(i), 16)]++
	}
	for p, n := range counts {
		if n == 0 {
			t.Fatalf("partition %d got nothing: %v", p, counts)
		}
	}
	if MessageKey("s", "m") == MessageKey("s", "m2") || MessageKey("a:b", "c") == MessageKey("a", "b:c") {
		t.Fatal("message keys collide")
	}
	// Rendezvous: each of two workers gets a fair share of 64 partitions,
	// and a third takes some from both without moving the others.
	own := func(workers ...string) map[int]string {
		m := map[int]string{}
		for p := range 64 {
			best := ""
			for _, w := range workers {
				if best == "" || score(w, p) > score(best, p) {
					best = w
				}
			}
			m[p] = best
		}
		return m
	}
	two, three := own("worker-1", "worker-2"), own("worker-1", "worker-2", "worker-3")
	n1 := 0
	for p := range 64 {
		if two[p] == "worker-1" {
			n1++
		}
		if three[p] != "worker-3" && three[p] != two[p] {
			t.Fatalf("partition %d moved from %s to %s when worker-3 joined", p, two[p], three[p])
		}
	}
	if n1 < 16 || n1 > 48 {
		t.Fatalf("worker-1 owns %d of 64 partitions with two workers", n1)
	}
}

func FuzzDecodeIn(f *testing.F) {
	f.Add([]byte(`{"ChannelID":"c","PeerID":"p","SessionKey":"c:a:p","MessageID":"m"}`))
	f.Add([]byte(`{"Media":[1]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := decodeIn(b); err == nil && (m.MessageID == "" || m.SessionKey == "") {
			t.Fatalf("accepted %q without ids", b)
		}
	})
}

func FuzzDecodeClaim(f *testing.F) {
	f.Add([]byte(`{"state":"done","session":"s","message_id":"m","reply":{"text":"t"}}`))
	f.Add([]byte(`{"state":"running","attempt":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := decodeClaim(b); err == nil && c.State == StateDone && c.Reply == nil {
			t.Fatalf("accepted a done claim without a reply: %q", b)
		}
	})
}

func FuzzDecodeOutAndHist(f *testing.F) {
	f.Add([]byte(`{"channel":"c","peer":"p","message_id":"m","kind":1}`))
	f.Add([]byte(`{"session":"s","records":[{"role":"user","content":null}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := decodeOut(b); err == nil && m.MessageID == "" {
			t.Fatalf("accepted %q without a message_id", b)
		}
		if e, err := decodeHist(b); err == nil && len(e.Records) == 0 {
			t.Fatalf("accepted %q without records", b)
		}
	})
}
