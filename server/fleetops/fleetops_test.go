package fleetops

import (
	"errors"
	"strings"
	"testing"

	"termlink/link"
)

// part takes the answers of one kind and counts what it is given.
type part struct {
	answers  link.Type
	connects int
	reports  int
	err      error
}

func (p *part) DeviceConnected(string, *link.Connect) { p.connects++ }
func (p *part) Answers() link.Type                    { return p.answers }
func (p *part) Report(string, string, link.Frame) (bool, error) {
	p.reports++
	return p.err == nil, p.err
}

// Every part gets each connect; an answer goes to the first part of its
// kind only, and its refusal is Report's error; an answer of a kind no
// part takes is refused, naming the kind.
func TestOpsRoutesByKind(t *testing.T) {
	updates := &part{answers: link.TypeUpdateStatus}
	acks := &part{answers: link.TypeSettingsAck, err: errors.New("settings version 5 was not sent to this device")}
	shadow := &part{answers: link.TypeUpdateStatus}
	ops := &Ops{Parts: []Part{updates, acks, shadow}}

	ops.DeviceConnected("terminal-dev", &link.Connect{PeerID: "kiosk"})
	for _, p := range ops.Parts {
		if p.(*part).connects != 1 {
			t.Fatalf("a part of kind %s got %d connects, want 1", p.Answers(), p.(*part).connects)
		}
	}
	if err := ops.Report("terminal-dev", "kiosk", &link.UpdateStatus{UpdateID: "u-1"}); err != nil {
		t.Fatalf("update_status: %v", err)
	}
	if updates.reports != 1 || shadow.reports != 0 {
		t.Fatalf("update_status reached the first part %d times, the second %d; want 1 and 0", updates.reports, shadow.reports)
	}
	if err := ops.Report("terminal-dev", "kiosk", &link.SettingsAck{Version: 5}); err == nil || err.Error() != acks.err.Error() {
		t.Fatalf("settings_ack refused with %v, want the part's %q", err, acks.err)
	}
	err := (&Ops{Parts: []Part{updates}}).Report("terminal-dev", "kiosk", &link.SettingsAck{Version: 5})
	if err == nil || !strings.Contains(err.Error(), string(link.TypeSettingsAck)) {
		t.Fatalf("an answer no part takes: %v, want an error naming %s", err, link.TypeSettingsAck)
	}
}
