package link

import (
	"errors"
	"strings"
	"testing"
)

func TestQuestionAnswerRoundTrip(t *testing.T) {
	q := &Question{MessageID: "m-1", QuestionID: "q-1", Text: "Run `rm -rf build`?",
		Options:        []Option{{ID: "allow_once", Label: "Allow once"}, {ID: "allow_always", Label: "Always"}, {ID: "reject", Label: "Deny"}},
		TimeoutSeconds: 120}
	b, err := Encode(q)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"question","message_id":"m-1","question_id":"q-1","text":"Run ` + "`rm -rf build`" + `?","options":[{"id":"allow_once","label":"Allow once"},{"id":"allow_always","label":"Always"},{"id":"reject","label":"Deny"}],"timeout_seconds":120}`
	if string(b) != want {
		t.Fatalf("encoded\n %s\nwant\n %s", b, want)
	}
	f, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := f.(*Question)
	if !ok || got.QuestionID != "q-1" || len(got.Options) != 3 || got.Options[2].Label != "Deny" || got.TimeoutSeconds != 120 {
		t.Fatalf("decoded %#v", f)
	}
	if o, ok := got.Option("allow_always"); !ok || o.Label != "Always" {
		t.Fatalf("Option(allow_always) = %+v %v", o, ok)
	}
	if _, ok := got.Option("nope"); ok {
		t.Fatal("Option found an id the question does not offer")
	}

	a := &Answer{MessageID: "a-1", QuestionID: "q-1", OptionID: "reject"}
	b, err = Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"type":"answer","message_id":"a-1","question_id":"q-1","option_id":"reject"}` {
		t.Fatalf("encoded %s", b)
	}
	f, err = Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := f.(*Answer); !ok || *got != *a {
		t.Fatalf("decoded %#v", f)
	}
}

// Every bound of a question and an answer is refused at decode, naming
// the field and saying what is wrong.
func TestQuestionAnswerRefused(t *testing.T) {
	opts := func(n int) string {
		var parts []string
		for i := range n {
			parts = append(parts, `{"id":"o`+string(rune('a'+i))+`","label":"L"}`)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	q := func(mut string) string {
		return `{"type":"question","message_id":"m","question_id":"q","text":"t","options":` + opts(2) + `,"timeout_seconds":30` + mut + `}`
	}
	long := strings.Repeat("x", MaxOptionIDBytes+1)
	for _, c := range []struct{ frame, field, msg string }{
		{`{"type":"question","question_id":"q","text":"t","options":` + opts(2) + `,"timeout_seconds":3}`, "message_id", "missing"},
		{`{"type":"question","message_id":"m","text":"t","options":` + opts(2) + `,"timeout_seconds":3}`, "question_id", "missing"},
		{`{"type":"question","message_id":"m","question_id":"q","options":` + opts(2) + `,"timeout_seconds":3}`, "text", "missing"},
		{`{"type":"question","message_id":"m","question_id":"q","text":"t","options":` + opts(1) + `,"timeout_seconds":3}`, "options", "2 to 9 options, got 1"},
		{`{"type":"question","message_id":"m","question_id":"q","text":"t","options":` + opts(10) + `,"timeout_seconds":3}`, "options", "got 10"},
		{`{"type":"question","message_id":"m","question_id":"q","text":"t","options":` + opts(2) + `}`, "timeout_seconds", "from 1"},
		{`{"type":"question","message_id":"m","question_id":"q","text":"t","options":` + opts(2) + `,"timeout_seconds":86401}`, "timeout_seconds", "got 86401"},
		{`{"type":"question","message_id":"m","question_id":"q","text":"t","options":[{"id":"a","label":"A"},{"id":"a","label":"B"}],"timeout_seconds":3}`, "options[1].id", "earlier option"},
		{`{"type":"question","message_id":"m","question_id":"q","text":"t","options":[{"id":"a","label":"A"},{"id":"b"}],"timeout_seconds":3}`, "options[1].label", "missing"},
		{`{"type":"question","message_id":"m","question_id":"q","text":"t","options":[{"id":"a","label":"A"},{"id":"` + long + `","label":"B"}],"timeout_seconds":3}`, "options[1].id", "more than 64"},
		{`{"type":"question","message_id":"m","question_id":"q","text":"t","options":[{"id":"a","label":"A\nB"},{"id":"b","label":"B"}],"timeout_seconds":3}`, "options[0].label", "control"},
		{`{"type":"question","message_id":"m","question_id":"q","text":"` + strings.Repeat("t", MaxQuestionTextBytes+1) + `","options":` + opts(2) + `,"timeout_seconds":3}`, "text", "more than"},
		{q(`,"question_id":"q2"`), "", "twice"},
		{`{"type":"answer","question_id":"q","option_id":"a"}`, "message_id", "missing"},
		{`{"type":"answer","message_id":"a","option_id":"a"}`, "question_id", "missing"},
		{`{"type":"answer","message_id":"a","question_id":"q"}`, "option_id", "missing"},
		{`{"type":"answer","message_id":"a","question_id":"q","option_id":"` + long + `"}`, "option_id", "more than 64"},
		{`{"type":"answer","message_id":"` + strings.Repeat("a", MaxFleetIDBytes+1) + `","question_id":"q","option_id":"a"}`, "message_id", "more than 128"},
	} {
		_, err := Decode([]byte(c.frame))
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("%.80s: err %v, want a DecodeError", c.frame, err)
			continue
		}
		if (c.field != "" && de.Field != c.field) || !strings.Contains(de.Error(), c.msg) {
			t.Errorf("%.80s: %v (field %q), want field %q saying %q", c.frame, err, de.Field, c.field, c.msg)
		}
	}
	if _, err := Decode([]byte(q(""))); err != nil {
		t.Fatalf("a good question refused: %v", err)
	}
}
