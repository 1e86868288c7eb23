package link

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An answer is stored as an answer record: it survives a reopen with its
// question and option, in order with the messages, and a compaction.
func TestFileOutboxKeepsAnswers(t *testing.T) {
	dir := t.TempDir()
	o := openOutbox(t, dir)
	m := mustAdd(t, o, "hello")
	a, err := o.AddAnswer("q-1", "allow_once")
	if err != nil {
		t.Fatal(err)
	}
	if !a.IsAnswer() || a.Text != "" || a.ID == m.ID {
		t.Fatalf("answer entry %+v", a)
	}
	data, _ := os.ReadFile(filepath.Join(dir, OutboxFile))
	if !strings.Contains(string(data), `"op":"answer"`) || !strings.Contains(string(data), `"question_id":"q-1"`) {
		t.Fatalf("the file holds:\n%s", data)
	}
	o.Close()
	o = openOutbox(t, dir)
	p := o.Pending()
	if len(p) != 2 || p[0].ID != m.ID || p[0].Text != "hello" || p[0].IsAnswer() || p[1].ID != a.ID || p[1].QuestionID != "q-1" || p[1].OptionID != "allow_once" || p[1].Text != "" {
		t.Fatalf("pending after reopen %+v", p)
	}
	// Enough done messages to compact: the answer stays.
	var all []OutboxEntry
	for i := range 100 {
		all = append(all, mustAdd(t, o, fmt.Sprintf("m %d", i)))
	}
	for _, e := range append(all, m) {
		if err := o.Done(e.ID); err != nil {
			t.Fatal(err)
		}
	}
	if o.lines >= 100 {
		t.Fatalf("%d records: not compacted", o.lines)
	}
	o.Close()
	o = openOutbox(t, dir)
	defer o.Close()
	if p := o.Pending(); len(p) != 1 || p[0].ID != a.ID || p[0].QuestionID != "q-1" || p[0].OptionID != "allow_once" {
		t.Fatalf("pending after compaction %+v", p)
	}
	if err := o.Done(a.ID); err != nil || len(o.Pending()) != 0 {
		t.Fatalf("Done: %v, pending %v", err, o.Pending())
	}
}

// The memory outbox and the fallback outbox keep an answer's fields
// too, also when the fallback stores what it kept in memory to the file.
func TestAnswersInMemoryAndFallback(t *testing.T) {
	mo := NewMemoryOutbox()
	a, err := mo.AddAnswer("q-2", "reject")
	if err != nil || !a.IsAnswer() {
		t.Fatal(a, err)
	}
	if p := mo.Pending(); len(p) != 1 || p[0].ID != a.ID || p[0].QuestionID != "q-2" || p[0].OptionID != "reject" {
		t.Fatalf("memory pending %+v", p)
	}
	dir := t.TempDir()
	fo, err := OpenFallbackOutbox(dir, FallbackOptions{FileOutboxOptions: quiet})
	if err != nil {
		t.Fatal(err)
	}
	fo.mu.Lock()
	fo.leaveFile(os.ErrPermission) // as after a failed write
	fo.mu.Unlock()
	b, err := fo.AddAnswer("q-3", "allow_once")
	if err != nil {
		t.Fatal(err)
	}
	if !fo.recover() {
		t.Fatal("the fallback did not go back to the file")
	}
	fo.Close()
	o := openOutbox(t, dir)
	defer o.Close()
	if p := o.Pending(); !slices.EqualFunc(p, []OutboxEntry{b}, func(x, y OutboxEntry) bool {
		return x.ID == y.ID && x.QuestionID == y.QuestionID && x.OptionID == y.OptionID && x.Text == ""
	}) {
		t.Fatalf("the file holds %+v, want the answer %+v", p, b)
	}
}
