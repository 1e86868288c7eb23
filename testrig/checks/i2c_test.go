package checks

import (
	"context"
	"errors"
	"strings"
	"testing"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"

	"termlink/display"
	"termlink/testrig/lcdemu"
)

// deadBus is a bus on which every transaction fails with err: nothing
// answers (a NACK error) or the bus itself is broken.
type deadBus struct{ err error }

func (d deadBus) Tx(addr uint16, w, r []byte) error { return d.err }
func (deadBus) SetSpeed(physic.Frequency) error     { return nil }
func (deadBus) String() string                      { return "dead bus" }

var (
	errNACK    = errors.New("sysfs-i2c: remote I/O error")
	errTimeout = errors.New("sysfs-i2c: connection timed out")
)

func newEmu(t *testing.T, addr uint16, rows, cols int, rom display.ROM) (*lcdemu.Bus, *lcdemu.Clock) {
	t.Helper()
	clk := &lcdemu.Clock{}
	bus, err := lcdemu.New(&lcdemu.Opts{Addr: addr, Rows: rows, Cols: cols, ROM: rom, Clock: clk, Timing: true})
	if err != nil {
		t.Fatal(err)
	}
	return bus, clk
}

func TestI2CScan(t *testing.T) {
	emu27, _ := newEmu(t, 0x27, 2, 16, display.A00)
	emu3f, _ := newEmu(t, 0x3F, 2, 16, display.A00)
	tests := []struct {
		name    string
		bus     i2c.Bus
		o       I2COptions
		pass    bool
		summary string
		devices float64
	}{
		{"emulator", emu27, I2COptions{Bus: "emu"}, true, "1 device answers on emu: 0x27 (PCF8574 LCD backpack)", 1},
		{"PCF8574A", emu3f, I2COptions{}, true, "0x3f (PCF8574A LCD backpack)", 1},
		{"expected found", emu27, I2COptions{Expect: []uint16{0x27}}, true, "0x27", 1},
		{"expected missing", emu3f, I2COptions{Expect: []uint16{0x27}}, false,
			"nothing answers at 0x27 (PCF8574 LCD backpack) on the bus: an LCD backpack answers at 0x3f instead", 1},
		{"nothing answers", deadBus{errNACK}, I2COptions{Bus: "/dev/i2c-1"}, false,
			"no device answers on /dev/i2c-1 (0x08-0x77): check power (VCC, GND) and the SDA/SCL wires", 0},
		{"stuck bus", deadBus{errTimeout}, I2COptions{Bus: "/dev/i2c-1"}, false,
			"/dev/i2c-1 itself fails (0x08: sysfs-i2c: connection timed out): check SDA/SCL wiring", 0},
		{"bad range", emu27, I2COptions{First: 0x10, Last: 0x80}, false, "want 7-bit addresses", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := I2CScan(context.Background(), tt.bus, tt.o)
			var out strings.Builder
			res.WriteText(&out)
			t.Logf("\n%s", out.String())
			if res.Pass != tt.pass || !strings.Contains(res.Summary, tt.summary) {
				t.Fatalf("pass %v summary %q; want %v and %q", res.Pass, res.Summary, tt.pass, tt.summary)
			}
			if n, _ := res.Metric("devices"); n != tt.devices {
				t.Errorf("devices %v, want %v", n, tt.devices)
			}
		})
	}
}

func TestI2CScanGridAndCancel(t *testing.T) {
	emu, _ := newEmu(t, 0x27, 2, 16, display.A00)
	res := I2CScan(context.Background(), emu, I2COptions{})
	grid := res.Details[0]
	if !strings.Contains(grid, "20: -- -- -- -- -- -- -- 27 --") || !strings.HasPrefix(grid, "     0  1  2") {
		t.Errorf("grid:\n%s", grid)
	}
	if v, ok := res.Metric("addr_0x27"); !ok || v != 1 {
		t.Errorf("addr_0x27 metric %v %v", v, ok)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := I2CScan(ctx, emu, I2COptions{}); res.Pass || !strings.Contains(res.Summary, "interrupted") {
		t.Errorf("cancelled scan: %v %q", res.Pass, res.Summary)
	}
}
