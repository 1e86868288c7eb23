package hd44780_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pdisplay "periph.io/x/conn/v3/display"
	"periph.io/x/conn/v3/display/displaytest"
)

func TestPeriphTextDisplayChecks(t *testing.T) {
	for _, size := range [][2]int{{2, 16}, {4, 20}} {
		t.Run(fmt.Sprintf("%dx%d", size[1], size[0]), func(t *testing.T) {
			r := newRig(t, size[0], size[1], nil)
			for _, err := range displaytest.TestTextDisplay(r.dev, false) {
				t.Error(err)
			}
			if got := r.bus.Text()[0]; !strings.HasPrefix(got, "Set dev on") {
				t.Errorf("glass row 0 = %q", got)
			}
			r.noWarnings()
		})
	}
}

func TestTextDisplayCursorAndWrite(t *testing.T) {
	r := newRig(t, 2, 16, nil)
	d := r.dev
	if err := d.Cursor(pdisplay.CursorUnderline, pdisplay.CursorBlink); err != nil {
		t.Fatal(err)
	}
	if st := r.bus.State(); !st.CursorOn || !st.BlinkOn {
		t.Errorf("cursor state %+v", st)
	}
	if err := d.MoveTo(1, 3); err != nil {
		t.Fatal(err)
	}
	if ac := r.bus.State().AC; ac != 0x43 {
		t.Errorf("cursor at %#02x, want 0x43", ac)
	}
	if err := d.MoveTo(2, 0); !errors.Is(err, pdisplay.ErrInvalidCommand) {
		t.Errorf("MoveTo(2, 0) = %v", err)
	}
	if _, err := d.WriteString("abc"); err != nil {
		t.Fatal(err)
	}
	if ac := r.bus.State().AC; ac != 0x46 {
		t.Errorf("cursor after write at %#02x, want 0x46", ac)
	}
	if err := d.Move(pdisplay.Backward); err != nil {
		t.Fatal(err)
	}
	if err := d.Move(pdisplay.Up); err != nil {
		t.Fatal(err)
	}
	if ac := r.bus.State().AC; ac != 0x05 {
		t.Errorf("cursor after moves at %#02x, want 0x05", ac)
	}
	if err := d.Cursor(pdisplay.CursorMode(9)); err == nil {
		t.Error("bad cursor mode accepted")
	}
	if err := d.Cursor(pdisplay.CursorOff); err != nil {
		t.Fatal(err)
	}
	// Write wraps rows; '\n' starts a row; with auto scroll the text moves up.
	if err := d.Clear(); err != nil {
		t.Fatal(err)
	}
	if err := d.AutoScroll(true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteString("0123456789abcdefXYZ\nlast"); err != nil {
		t.Fatal(err)
	}
	if got := r.bus.Text(); got[0] != "XYZ             " || got[1] != "last            " {
		t.Errorf("glass = %q", got)
	}
	if err := d.AutoScroll(false); err != nil {
		t.Fatal(err)
	}
	if err := d.Home(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteString("Grüße…"); err != nil {
		t.Fatal(err)
	}
	if got := r.bus.Text()[0]; got != "Grüsse...       " {
		t.Errorf("folded write = %q", got)
	}
	if err := d.Display(false); err != nil {
		t.Fatal(err)
	}
	if r.bus.State().DisplayOn || strings.TrimSpace(strings.Join(r.bus.Text(), "")) != "" {
		t.Error("display still on")
	}
	if err := d.Display(true); err != nil {
		t.Fatal(err)
	}
	if got := d.Frame().Line(0); got != "Grüsse...       " {
		t.Errorf("Frame = %q", got)
	}
	if err := d.Halt(); err != nil {
		t.Fatal(err)
	}
	if st := r.bus.State(); st.DisplayOn || st.Backlight {
		t.Errorf("after Halt: %+v", st)
	}
	if d.MinRow() != 0 || d.MinCol() != 0 || d.Rows() != 2 || d.Cols() != 16 || !strings.Contains(d.String(), "16x2") {
		t.Error("TextDisplay accessors")
	}
	r.noWarnings()
}
