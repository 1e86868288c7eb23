package bus

import "testing"

func TestChatID(t *testing.T) {
	m := Inbound{PeerID: "dev1"}
	if m.ChatID() != "dev1" {
		t.Fatal(m.ChatID())
	}
	m.ThreadID = "t2"
	if m.ChatID() != "dev1:t2" {
		t.Fatal(m.ChatID())
	}
}
