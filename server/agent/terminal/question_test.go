package terminal

import (
	"testing"

	"termlink/link"
)

// A question frame's fields, and what is wrong with a bad one.
func TestParseQuestionFrame(t *testing.T) {
	f, ok := ParseFrame([]byte(`{"type":"question","id":"q1","text":"Go?","options":[{"id":"y","label":"Yes"},{"id":"n","label":"No"}],"timeout_seconds":30}`))
	if !ok || f.Type != FrameQuestion || f.Problem != "" || f.ID != "q1" || f.Text != "Go?" || f.TimeoutSeconds != 30 ||
		len(f.Options) != 2 || f.Options[0] != (link.Option{ID: "y", Label: "Yes"}) {
		t.Fatalf("frame %+v ok %v", f, ok)
	}
	for line, want := range map[string]string{
		`{"type":"question","text":"Go?"}`:                                `question frame without a string "id"`,
		`{"type":"question","id":"q","text":5}`:                           `question frame without a string "text"`,
		`{"type":"question","id":"q","text":"Go?","options":"yes"}`:       `question frame whose "options" is not a list of {"id","label"} objects`,
		`{"type":"question","id":"q","text":"Go?","timeout_seconds":-1}`:  `question frame whose "timeout_seconds" is not a positive whole number`,
		`{"type":"question","id":"q","text":"Go?","timeout_seconds":"x"}`: `question frame whose "timeout_seconds" is not a positive whole number`,
	} {
		f, ok := ParseFrame([]byte(line))
		if !ok || f.Type != FrameQuestion || f.Problem != want {
			t.Errorf("%s: problem %q, want %q", line, f.Problem, want)
		}
	}
}
