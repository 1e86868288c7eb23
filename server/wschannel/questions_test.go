package wschannel

import (
	"fmt"
	"testing"
	"time"

	"termlink/link"
)

func testQuestion(id string, secs int) link.Question {
	return link.Question{MessageID: "m", QuestionID: id, Text: "?", TimeoutSeconds: secs,
		Options: []link.Option{{ID: "y", Label: "Yes"}, {ID: "n", Label: "No"}}}
}

// What an adapter keeps of its peers' questions: at most
// maxQuestionsPerPeer open (the oldest goes), each with the seconds it
// has left; a closed one's session is kept for a late answer; one past
// its deadline is forgotten at the next sweep, its session kept too.
func TestOpenQuestionsKept(t *testing.T) {
	var s openQuestions
	now := time.Unix(1000, 0)
	for i := range maxQuestionsPerPeer + 2 {
		s.put("p", "s", testQuestion(fmt.Sprintf("q%d", i), 60), now)
	}
	got := s.of("p", now.Add(30*time.Second))
	if len(got) != maxQuestionsPerPeer || got[0].QuestionID != "q2" || got[0].TimeoutSeconds != 30 {
		t.Fatalf("kept %d, first %+v", len(got), got[0])
	}
	s.close("p", "q2", now)
	if key, ok := s.sessionOf("p", "q2"); !ok || key != "s" {
		t.Fatalf("closed q2's session %q %v", key, ok)
	}
	if _, ok := s.sessionOf("p", "q0"); ok {
		t.Fatal("q0, pushed out, is still known")
	}
	s.put("p", "s:t", testQuestion("short", 1), now)
	later := now.Add(2 * questionSweepEvery)
	for _, q := range s.of("p", later) {
		t.Errorf("%s still open past its deadline", q.QuestionID)
	}
	if key, ok := s.sessionOf("p", "short"); !ok || key != "s:t" {
		t.Fatalf("timed-out question's session %q %v", key, ok)
	}
	s.sweep(later.Add(closedKeep + 2*questionSweepEvery))
	if len(s.byPeer) != 0 {
		t.Fatalf("kept %+v after every question closed long ago", s.byPeer["p"])
	}
}

func TestThreadOf(t *testing.T) {
	for _, c := range []struct{ key, want string }{{"c:a:p", "own"}, {"c:a:p:t2", "t2"}, {"c:a:q", ""}} {
		if got := threadOf(c.key, "c:a:p", "own"); got != c.want {
			t.Errorf("threadOf(%q) = %q, want %q", c.key, got, c.want)
		}
	}
}
