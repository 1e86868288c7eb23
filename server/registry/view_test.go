package registry

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

// A View fed a registry's peers answers every read as the registry does:
// pages and cursors under each filter, counts, online counts per tag;
// a peer put again streams to subscribers, a removed one is gone.
func TestViewReadsAsRegistry(t *testing.T) {
	c := &clock{time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	r := open(t, t.TempDir(), c)
	defer r.Close()
	for i := range 12 {
		d := dev(fmt.Sprintf("k%02d", i), map[string]string{"site": []string{"lobby", "hall", "roof"}[i%3]})
		if i%2 == 0 {
			d = authed(d)
		}
		gen, _, err := r.Connected(d)
		if err != nil {
			t.Fatal(err)
		}
		if i%4 == 1 {
			r.Disconnected("ch", d.PeerID, gen)
		}
	}
	v := NewView(func(ch, peer string) int { return len(peer) })
	v.now = c.now
	for _, p := range r.List("ch", Filter{}) {
		v.Put(p)
	}
	r.opt.NoticesPending = func(ch, peer string) int { return len(peer) }
	on, off := true, false
	for _, f := range []Filter{{}, {Online: &on}, {Online: &off}, {Tags: map[string]string{"site": "hall"}}, {Tags: map[string]string{"site": "roof"}, Online: &on}} {
		for _, limit := range []int{0, 1, 5} {
			after := ""
			for {
				want, wantNext := r.Page("ch", f, after, limit)
				got, next := v.Page("ch", f, after, limit)
				if !reflect.DeepEqual(got, want) || next != wantNext {
					t.Fatalf("filter %+v limit %d after %q: view %v next %q, registry %v next %q", f, limit, after, got, next, want, wantNext)
				}
				if next == "" {
					break
				}
				after = next
			}
		}
	}
	wantN, wantTags := r.Online("ch", 10)
	if n, tags := v.Online("ch", 10); n != wantN || !reflect.DeepEqual(tags, wantTags) {
		t.Errorf("online: view %d %v, registry %d %v", n, tags, wantN, wantTags)
	}
	if v.Count("ch") != 12 || v.Count("other") != 0 {
		t.Errorf("count %d", v.Count("ch"))
	}

	sub := v.Subscribe("ch", 4)
	defer sub.Close()
	p, _ := v.Get("ch", "k03")
	p.Online, p.Edge = true, "edge-b"
	v.Put(p)
	if got := <-sub.C(); got.PeerID != "k03" || !got.Online || got.Edge != "edge-b" || got.LastSeen != formatTime(c.t) || got.NoticesPending != 3 {
		t.Errorf("streamed %+v", got)
	}
	v.Remove("ch", "k03")
	if _, ok := v.Get("ch", "k03"); ok || v.Count("ch") != 11 {
		t.Error("k03 still listed after Remove")
	}
	if l := v.List("ch", Filter{}); len(l) != 11 || l[3].PeerID != "k04" {
		t.Errorf("listed after Remove: %d", len(l))
	}
}

// A View counts a peer's reconnects of the last hour when it is read, as
// the registry does: an hour after a device's reconnects both show none
// (the view showed the count it was put with).
func TestViewCountsReconnectsWhenRead(t *testing.T) {
	c := &clock{time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}
	r := open(t, t.TempDir(), c)
	defer r.Close()
	for range 3 {
		if _, _, err := r.Connected(dev("k1", nil)); err != nil {
			t.Fatal(err)
		}
	}
	v := NewView(nil)
	v.now = c.now
	p, _ := r.Get("ch", "k1")
	v.Put(p)
	if got, _ := v.Get("ch", "k1"); got.ReconnectsLastHour != 2 || p.ReconnectsLastHour != 2 {
		t.Fatalf("reconnects: view %d, registry %d, want 2", got.ReconnectsLastHour, p.ReconnectsLastHour)
	}
	c.t = c.t.Add(61 * time.Minute)
	want, _ := r.Get("ch", "k1")
	got, _ := v.Get("ch", "k1")
	if got.ReconnectsLastHour != 0 || want.ReconnectsLastHour != 0 {
		t.Errorf("an hour later: view %d, registry %d, want 0", got.ReconnectsLastHour, want.ReconnectsLastHour)
	}
	if l := v.List("ch", Filter{}); len(l) != 1 || l[0].ReconnectsLastHour != 0 {
		t.Errorf("listed an hour later: %+v", l)
	}
}
