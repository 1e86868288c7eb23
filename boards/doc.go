// Package boards describes the supported boards as data: profiles, their
// strict decoding and their validation.
//
// A profile (embedded JSON, see profiles/) says what is connected: the
// display (an HD44780 character LCD behind a PCF8574 I²C backpack or on GPIO
// lines, a VT100 console on this terminal or on a serial port, or any
// display LCDd drives), its size
// and character ROM, the keypad's GPIO lines and keymap, the serial port.
// Load and LoadFile decode a profile strictly: unknown fields, duplicate
// fields and bad values are errors that name the field,
//
//	rpi-lcd2004-i2c.json: display.address: 0x50 is not a PCF8574 address (0x20-0x27, 0x38-0x3F)
//
// The package is data only: it opens nothing. device.OpenBoard (and
// device.OpenParts for the bare parts) turns a profile into hardware, for
// termd and for every termrig check. The keypad grammar (keymaps and key
// bindings) is termlink/internal/keymap's, shared with device/input.
//
// An lcdproc display makes termd a client of LCDproc's LCDd, which drives
// the glass: display.address is LCDd's host:port and display.keys maps the
// keys LCDd reports to keypad keys.
//
// An hd44780-emu display (the sim-lcd board) needs no hardware: termd's
// HD44780 driver writes to the emulator of an HD44780 behind a PCF8574
// (testrig/lcdemu), whose glass is drawn in this terminal; the keyboard is
// a 4x4 keypad. It is the demo's glass against any server.
//
// PCF8574 datasheet (addresses): https://www.ti.com/lit/ds/symlink/pcf8574.pdf
// Raspberry Pi GPIO and interfaces:
// https://www.raspberrypi.com/documentation/computers/raspberry-pi.html
package boards
