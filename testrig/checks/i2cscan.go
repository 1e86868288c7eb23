package checks

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"periph.io/x/conn/v3/i2c"
)

// I2COptions configure I2CScan.
type I2COptions struct {
	// Bus names the bus in messages ("/dev/i2c-1"); "" means "the bus".
	Bus string
	// First and Last bound the scan; 0 and 0 mean 0x08-0x77, the 7-bit
	// addresses that are not reserved.
	First, Last uint16
	// Expect lists addresses that must answer (the board's LCD, say); the
	// check fails when one does not. Without it the check fails only when
	// nothing answers at all.
	Expect []uint16
}

// LikelyPart names the part usually found at a 7-bit I²C address on a
// terminal device: the PCF8574 (0x20-0x27) and PCF8574A (0x38-0x3F) I/O
// expanders of HD44780 LCD backpacks. Others are "unknown".
func LikelyPart(addr uint16) string {
	switch {
	case addr >= 0x20 && addr <= 0x27:
		return "PCF8574 LCD backpack"
	case addr >= 0x38 && addr <= 0x3F:
		return "PCF8574A LCD backpack"
	}
	return "unknown"
}

// Probe reports whether a device acknowledges at addr: it reads one byte,
// which a PCF8574 answers with its port pins without changing its outputs
// (a write would change what an LCD backpack drives). The error is the
// bus's, nil when the device answered.
func Probe(bus i2c.Bus, addr uint16) error {
	var b [1]byte
	return bus.Tx(addr, nil, b[:])
}

// isNACK reports whether err is what a bus returns when no device
// acknowledges its address: EREMOTEIO or ENXIO from Linux i2c-dev (which
// periph formats with %v), or an emulator's NACK.
func isNACK(err error) bool {
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"remote i/o error", "no such device or address", "nack", "no ack"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// I2CScan probes every address of bus and lists those that answer, with the
// likely part.
func I2CScan(ctx context.Context, bus i2c.Bus, o I2COptions) Result {
	r := newResult("i2c-scan")
	if o.Bus == "" {
		o.Bus = "the bus"
	}
	if o.First == 0 && o.Last == 0 {
		o.First, o.Last = 0x08, 0x77
	}
	if o.First > o.Last || o.Last > 0x7F {
		r.Fail("scan range %#02x-%#02x: want 7-bit addresses, first <= last", o.First, o.Last)
		return *r
	}
	found, busErrs, err := scan(ctx, bus, o.First, o.Last)
	if err != nil {
		r.Fail("interrupted: %v", err)
		return *r
	}
	r.Details = append(r.Details, grid(found, o.First, o.Last))
	r.Set("devices", float64(len(found)))
	for _, a := range found {
		r.Set(fmt.Sprintf("addr_%#02x", a), 1)
	}
	probed := int(o.Last) - int(o.First) + 1
	if len(busErrs) > 0 {
		r.Detailf("%d addresses failed with an error other than no-answer, e.g. %v", len(busErrs), busErrs[0])
	}
	var names []string
	for _, a := range found {
		names = append(names, fmt.Sprintf("%#02x (%s)", a, LikelyPart(a)))
	}
	switch {
	case len(found) == 0 && len(busErrs) > probed/2:
		r.Fail("%s itself fails (%v): check SDA/SCL wiring and the pull-ups; a device may be holding SDA low (power-cycle it)", o.Bus, busErrs[0])
	case len(found) == 0:
		r.Fail("no device answers on %s (0x%02x-0x%02x): check power (VCC, GND) and the SDA/SCL wires (SDA to SDA, SCL to SCL)", o.Bus, o.First, o.Last)
	case len(found) == probed:
		r.Fail("every address answers on %s: that is not a real bus (SDA stuck, or a bus without ACK detection)", o.Bus)
	default:
		n := "device answers"
		if len(found) > 1 {
			n = "devices answer"
		}
		r.Summary = fmt.Sprintf("%d %s on %s: %s", len(found), n, o.Bus, strings.Join(names, ", "))
	}
	for _, want := range o.Expect {
		if !slices.Contains(found, want) {
			hint := ""
			if lcd := lcdCandidates(found); len(lcd) > 0 {
				hint = fmt.Sprintf(": an LCD backpack answers at %s instead (set that address in the board profile or pass --addr)", strings.Join(lcd, ", "))
			}
			r.Fail("nothing answers at %#02x (%s) on %s%s", want, LikelyPart(want), o.Bus, hint)
		}
	}
	return *r
}

// scan probes first..last and returns the addresses that answered and the
// errors that were not a plain NACK.
func scan(ctx context.Context, bus i2c.Bus, first, last uint16) (found []uint16, busErrs []error, err error) {
	for a := first; a <= last; a++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, context.Cause(ctx)
		}
		if err := Probe(bus, a); err == nil {
			found = append(found, a)
		} else if !isNACK(err) {
			busErrs = append(busErrs, fmt.Errorf("%#02x: %w", a, err))
		}
	}
	return found, busErrs, nil
}

func lcdCandidates(found []uint16) []string {
	var out []string
	for _, a := range found {
		if LikelyPart(a) != "unknown" {
			out = append(out, fmt.Sprintf("%#02x", a))
		}
	}
	return out
}

// grid draws the scan as i2cdetect does: rows of 16 addresses, "--" for no
// answer, the address for an answer, blank outside the scanned range.
func grid(found []uint16, first, last uint16) string {
	var b strings.Builder
	b.WriteString("     0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f")
	for row := uint16(0); row < 0x80; row += 0x10 {
		if row+0x0F < first || row > last {
			continue
		}
		fmt.Fprintf(&b, "\n%02x:", row)
		for a := row; a < row+0x10; a++ {
			switch {
			case a > last:
			case a < first:
				b.WriteString("   ")
			case slices.Contains(found, a):
				fmt.Fprintf(&b, " %02x", a)
			default:
				b.WriteString(" --")
			}
		}
	}
	return b.String()
}
