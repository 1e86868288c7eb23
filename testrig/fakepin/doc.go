// Package fakepin is GPIO pins wired to each other, for tests and for the
// simulated rig (termlink/testrig/checks/sim): a wire from an output to an
// input, a diode-less key matrix, and an 8-bit output port.
//
// periph's own fake, periph.io/x/conn/v3/gpio/gpiotest.Pin, is one pin on
// its own: Out records a level, Read returns the level the test set, and
// edges come from a channel the test fills. It cannot make an input read
// what another pin drives (a loopback wire, a keypad column joined to a row
// by a pressed key) nor turn outputs into a bus write, which is what the
// keypad scanner, the GPIO and keypad checks and the HD44780 GPIO transport
// need; it also needs github.com/jonboulle/clockwork, which this module does
// not use. The pins here keep gpiotest's shape: WaitForEdge reads edges from
// a buffered channel, which the pin's own changes fill.
//
// Every pin is safe for concurrent use.
package fakepin
