// Package checks holds termrig's hardware bring-up checks: serial loopback,
// I²C scan, LCD patterns, GPIO loopback, keypad, link, and the selftest that
// runs the ones a board has.
//
// Each check is one function that takes what it works on, already opened
// (an i2c.Bus, a serial port path, gpio pins, a keypad event source, a
// server URL), and returns a Result: a name, pass or fail, a one-line
// summary, details a person reads, and metrics a script reads. A Result
// renders as text (WriteText) or JSON (encoding/json). The command
// (cmd/termrig) only parses flags and opens the hardware; errors it meets
// opening a device go through ExplainOpen, which says what to do about them
// ("/dev/i2c-1 not found: enable I2C (raspi-config nonint do_i2c 0)").
//
// The checks run against real hardware through periph's host drivers and
// go.bug.st/serial, and against stand-ins in tests: socat PTY pairs for
// serial, the HD44780 emulator (termlink/testrig/lcdemu) for I²C, fake pins
// for GPIO. Package checks/sim wires the stand-ins together so that
// `termrig selftest --sim` runs anywhere.
package checks
