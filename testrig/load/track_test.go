package load

import (
	"strings"
	"testing"
	"time"

	"termlink/link"
)

// The latency log has one line per message sent, in the order sent: the
// send time, the ack's and the reply's delays in µs (-1: none), the id.
func TestWriteLatencies(t *testing.T) {
	tr := newTracker(3)
	t0 := time.Unix(100, 0)
	tr.sending("b", t0.Add(time.Millisecond))
	tr.sending("a", t0)
	tr.sending("c", t0.Add(2*time.Millisecond))
	tr.ack(&link.Ack{MessageID: "a", Accepted: true}, t0.Add(1500*time.Microsecond))
	tr.reply(&link.Message{Role: link.RoleAssistant, MessageID: "a", Text: "r"}, t0.Add(4*time.Millisecond))
	tr.ack(&link.Ack{MessageID: "b", Accepted: true}, t0.Add(3*time.Millisecond))
	var sb strings.Builder
	if err := tr.writeLatencies(&sb); err != nil {
		t.Fatal(err)
	}
	want := "100000000000 1500 4000 a\n100001000000 2000 -1 b\n100002000000 -1 -1 c\n"
	if sb.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", sb.String(), want)
	}
}
