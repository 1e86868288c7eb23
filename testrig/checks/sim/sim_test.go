package sim_test

import (
	"context"
	"strings"
	"termlink/internal/testwait"
	"testing"
	"time"

	"termlink/testrig/checks"
	"termlink/testrig/checks/sim"
)

// Every check passes on the simulated rig.
func TestRigPassesEveryCheck(t *testing.T) {
	rig, err := sim.New(sim.Options{Server: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rig.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Deadline)
	defer cancel()
	kp, err := rig.NewKeypad(0)
	if err != nil {
		t.Fatal(err)
	}
	results := []checks.Result{
		checks.I2CScan(ctx, rig.LCD, checks.I2COptions{Bus: "sim", Expect: []uint16{rig.Addr}}),
		checks.LCDTest(ctx, rig.LCD, rig.Addr, checks.LCDOptions{Bus: "sim", Rows: rig.Rows, Cols: rig.Cols, ROM: rig.ROM,
			Sleep: rig.Clock.Sleep, Now: rig.Clock.Now, Frames: 10}),
		// The simulated line (a PTY and a goroutine) goes quiet when the
		// machine is busy, not because bytes are lost: 5 s, as termrig's
		// --sim (stress run 26: 256 of 256 missing after 100 ms). A whole
		// pattern still ends at once.
		checks.SerialLoopback(ctx, rig.SerialPort, checks.SerialOptions{Bytes: 256, Quiet: 5 * time.Second}),
		checks.GPIOLoopback(ctx, rig.GPIOOut, rig.GPIOIn, checks.GPIOOptions{Toggles: 50}),
		checks.KeypadTest(ctx, kp, checks.KeypadOptions{Keymap: rig.Keymap, Timeout: 5 * time.Second}),
		checks.LinkTest(ctx, checks.LinkOptions{Server: rig.ServerURL, Pings: 5}),
	}
	for _, r := range results {
		var b strings.Builder
		r.WriteText(&b)
		t.Logf("\n%s", b.String())
		if !r.Pass {
			t.Errorf("%s failed: %s", r.Name, r.Summary)
		}
	}
	if text := rig.LCD.Text(); !strings.HasPrefix(text[0], "lcd-test done") {
		t.Errorf("glass:\n%s", strings.Join(text, "\n"))
	}
	for _, w := range rig.LCD.Warnings() {
		t.Errorf("emulator warning: %v", w)
	}
}
