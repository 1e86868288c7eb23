// Package boards describes the supported boards as data and opens their
// hardware.
//
// A profile (embedded JSON, see profiles/) says what is connected: the
// display (an HD44780 character LCD behind a PCF8574 I²C backpack or on GPIO
// lines, or a VT100 console on this terminal or on a serial port), its size
// and character ROM, the keypad's GPIO lines and keymap, the serial port.
// Load and LoadFile decode a profile strictly: unknown fields, duplicate
// fields and bad values are errors that name the field,
//
//	rpi-lcd2004-i2c.json: display.address: 0x50 is not a PCF8574 address (0x20-0x27, 0x38-0x3F)
//
// Open turns a profile into opened pieces (an I²C bus and address, GPIO
// pins, a serial port, the terminal) for the drivers in display/hd44780,
// display/console and device/input. periph's host drivers are initialised
// there (host.Init), never at package init, and only when the profile uses
// GPIO or I²C. Open's errors say what to check: a missing /dev/i2c-1 means
// "enable I2C with raspi-config", a permission error means "add the user to
// the i2c / gpio / dialout group".
//
// PCF8574 datasheet (addresses): https://www.ti.com/lit/ds/symlink/pcf8574.pdf
// Raspberry Pi GPIO and interfaces:
// https://www.raspberrypi.com/documentation/computers/raspberry-pi.html
package boards
