package boards_test

import (
	"strings"
	"testing"

	"termlink/boards"
)

// A profile's kiosk block gives termd's idle defaults; negative seconds
// are refused with the field's path.
func TestKioskBlock(t *testing.T) {
	p, err := boards.Parse("kiosk.json", []byte(`{"name": "lobby", "display": {"kind": "console"},
		"kiosk": {"idleSeconds": 60, "idleText": "Welcome", "backlight_off_after": 300}}`))
	if err != nil {
		t.Fatal(err)
	}
	if k := p.Kiosk; k == nil || k.IdleSeconds != 60 || k.IdleText != "Welcome" || k.BacklightOffAfter != 300 {
		t.Fatalf("kiosk %+v", p.Kiosk)
	}
	_, err = boards.Parse("bad.json", []byte(`{"display": {"kind": "console"}, "kiosk": {"idleSeconds": -1}}`))
	if err == nil || !strings.Contains(err.Error(), "kiosk") || !strings.Contains(err.Error(), "must not be negative") {
		t.Fatalf("negative idleSeconds: %v", err)
	}
}
