package device

import (
	"testing"
	"time"

	"termlink/boards"
	"termlink/device/input"
)

func TestKeypadEntryKiosk(t *testing.T) {
	p, err := boards.Parse("k.json", []byte(`{"display": {"kind": "hd44780-i2c", "rows": 2, "cols": 16, "bus": "1", "address": "0x27"},
		"keypad": {"kind": "4x4", "rows": ["GPIO5", "GPIO6", "GPIO13", "GPIO19"], "cols": ["GPIO12", "GPIO16", "GPIO20", "GPIO21"],
		"mode": "kiosk", "phrases": {"1": "yes", "2": "no"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := KeypadEntry(p.Keypad)
	if err != nil {
		t.Fatal(err)
	}
	acts := e.Handle(input.Event{Kind: input.KeyDown, Key: '2'})
	if len(acts) != 1 || acts[0].Kind != input.Send || acts[0].Text != "no" {
		t.Fatalf("kiosk 2: %+v", acts)
	}
}

func TestKeypadTimingFromProfile(t *testing.T) {
	for _, name := range boards.Names() {
		p, err := boards.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := KeypadEntry(p.Keypad); err != nil {
			t.Errorf("%s: KeypadEntry: %v", name, err)
		}
	}
	p, err := boards.Load("rpi-lcd1602-i2c")
	if err != nil {
		t.Fatal(err)
	}
	if tm := KeypadTiming(p.Keypad); tm.Debounce != 20*time.Millisecond || tm.RepeatDelay != 500*time.Millisecond ||
		tm.RepeatInterval != time.Second/15 {
		t.Errorf("timing %+v", tm)
	}
}
