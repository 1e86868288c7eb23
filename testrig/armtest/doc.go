// Package armtest runs the cross-built termd for the Raspberry Pi
// (ARMv6 for a Pi Zero/1, arm64 for a Pi 3/4/5 or Zero 2) under qemu-user
// against a real termserver on loopback: termd on the sim board, in a tmux
// window, sends a message typed on its keyboard and shows the reply. It
// proves the ARM binaries start, read their board profile, hold a session
// over WebSocket and draw; the tests of every package termd is built from
// run on emulated ARM too (make test-arm). What only a real Pi shows is the
// hardware: I2C and GPIO timing, the PCF8574 and HD44780 themselves.
//
// The package has tests only. They skip without qemu-user-static and tmux
// (CI installs both, and sets CI_REQUIRE_TOOLS=1 to fail instead).
package armtest
