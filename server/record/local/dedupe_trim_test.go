package local

import (
	"fmt"
	"slices"
	"testing"

	"termlink/link"
)

// A full session drops its oldest answered ids, never a pending one, and
// keeps the rest in order with their bytes accounted: also when the
// pending ids are the oldest, and when more than one id is over the bound.
// Replies are stored by lookup (a recovered message) and through the
// entry the claim returned (bus.Inbound.Ref), with the same outcome.
func TestDedupeTrimKeepsPendingAndOrder(t *testing.T) {
	for _, byRef := range []bool{false, true} {
		t.Run(fmt.Sprintf("byRef=%v", byRef), func(t *testing.T) { testDedupeTrim(t, byRef) })
	}
}

func testDedupeTrim(t *testing.T, byRef bool) {
	const key = "terminal-dev:local:dev"
	d := newDedupe(4, 0, nil)
	claims := map[string]*dedupeEntry{}
	reply := func(id string) *link.Message {
		return &link.Message{Role: link.RoleAssistant, MessageID: id, RunID: "r-" + id, Text: "a" + id}
	}
	claim := func(id string) {
		t.Helper()
		_, claimed, err := d.claim(key, id, "r-"+id)
		if err != nil || claimed == nil {
			t.Fatalf("claim %s: claimed=%v err=%v", id, claimed != nil, err)
		}
		claims[id] = claimed
	}
	finish := func(id string) {
		var ref *dedupeEntry
		if byRef {
			ref = claims[id]
		}
		d.finish(key, id, reply(id), ref)
	}
	check := func(want ...string) {
		t.Helper()
		d.mu.Lock()
		defer d.mu.Unlock()
		s := d.sessions[key]
		if !slices.Equal(s.order, want) {
			t.Fatalf("ids %v, want %v", s.order, want)
		}
		if len(s.entries) != len(want) {
			t.Fatalf("%d entries, want %d", len(s.entries), len(want))
		}
		n := int64(dedupeSessionOverhead + len(key))
		for _, id := range want {
			n += entryBytes(id, s.entries[id])
		}
		if s.bytes != n || d.bytes != n {
			t.Fatalf("bytes: session %d, table %d, want %d", s.bytes, d.bytes, n)
		}
	}
	claim("p1") // stays pending throughout
	claim("p2")
	for i := range 5 {
		id := fmt.Sprintf("m%d", i)
		claim(id)
		finish(id)
	}
	check("p1", "p2", "m3", "m4") // the two pending ones and the newest answered
	claim("m5")
	check("p1", "p2", "m4", "m5")
	finish("p2")
	claim("m6") // over by one: p2 is now the oldest answered
	check("p1", "m4", "m5", "m6")
	claim("m7")
	claim("m8") // m5..m8 and p1 pending: none is dropped, even over the bound
	check("p1", "m5", "m6", "m7", "m8")
	finish("m7") // the only answered one goes
	check("p1", "m5", "m6", "m8")
	finish("m6")
	check("p1", "m5", "m6", "m8")
	if prior, claimed, _ := d.claim(key, "m6", "r"); claimed != nil || prior.reply == nil || prior.reply.Text != "am6" {
		t.Fatalf("a kept id: claimed=%v prior=%+v, want its reply", claimed != nil, prior)
	}
	for _, id := range []string{"m4", "m7"} {
		if _, claimed, _ := d.claim(key, id, "r"); claimed == nil {
			t.Fatalf("dropped id %s is still a duplicate", id)
		}
	}
}

// BenchmarkDedupeFullSession is one message of a session that has reached
// its bound (the default 1024 ids): claim, then reply; each trims.
func BenchmarkDedupeFullSession(b *testing.B) {
	const key = "terminal-dev:local:dev"
	d := newDedupe(1024, 0, nil)
	ids := make([]string, 1024+b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("msg-%08d", i)
	}
	for _, id := range ids[:1024] {
		d.claim(key, id, "r")
		d.finish(key, id, &link.Message{Role: link.RoleAssistant, MessageID: id, Text: "You said: hello"}, nil)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, id := range ids[1024:] {
		d.claim(key, id, "r")
		d.finish(key, id, &link.Message{Role: link.RoleAssistant, MessageID: id, Text: "You said: hello"}, nil)
	}
}
