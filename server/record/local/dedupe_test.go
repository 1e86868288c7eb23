package local

import (
	"fmt"
	"testing"

	"termlink/server/session"
)

// A session put in memory from a short tail (start-up) is completed from
// the log on its first unknown id: older answered ids become duplicates,
// the ids it already had (newer claims included) are kept, and the
// per-session bound still holds.
func TestDedupeCompletesPartialSession(t *testing.T) {
	const key = "terminal-dev:local:dev"
	var log []session.Record
	for i := range 200 {
		id := fmt.Sprintf("m-%d", i)
		log = append(log, session.Record{Role: "user", MessageID: id},
			session.Record{Role: "assistant", MessageID: id, RunID: "r-" + id, Content: "a" + id})
	}
	loads := 0
	d := newDedupe(150, 0, func(k string, n int) ([]session.Record, error) {
		loads++
		if k != key || n != 150 {
			t.Errorf("load(%q, %d), want (%q, 150)", k, n, key)
		}
		return log[len(log)-2*n:], nil
	})
	d.mu.Lock()
	s := d.insert(key, log[len(log)-20:]) // the last 10 messages
	s.partial = true
	d.mu.Unlock()
	if _, claimed, err := d.claim(key, "m-195", "run-x"); err != nil || claimed != nil || loads != 0 {
		t.Fatalf("known id: claimed=%v err=%v loads=%d, want a duplicate without a load", claimed != nil, err, loads)
	}
	prior, claimed, err := d.claim(key, "m-60", "run-x")
	if err != nil || claimed != nil || prior.reply == nil || prior.reply.Text != "am-60" || loads != 1 {
		t.Fatalf("older id of a partial session: claimed=%v prior=%+v err=%v loads=%d, want its reply after one load", claimed != nil, prior, err, loads)
	}
	if _, claimed, _ := d.claim(key, "m-10", "run-x"); claimed == nil || loads != 1 {
		t.Fatalf("id older than the bound: claimed=%v loads=%d, want fresh, no second load", claimed != nil, loads)
	}
	if _, claimed, _ := d.claim(key, "new", "run-y"); claimed == nil {
		t.Fatal("a new id is not fresh")
	}
	if n := len(d.sessions[key].order); n > 150+2 {
		t.Fatalf("%d ids kept, want at most the bound (150) plus the pending ones", n)
	}
	if st := d.stats(); st.Completed != 1 {
		t.Fatalf("stats %+v, want one completion", st)
	}
}
