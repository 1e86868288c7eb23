// Package input reads a matrix keypad (4x4 or 3x4) through periph GPIO and
// turns its keys into text.
//
// Keypad does the electrical part: rows are driven outputs, columns are
// inputs with pull-ups. When no key is down every row is low and Run waits
// in gpio.PinIn.WaitForEdge on the columns, so an idle keypad costs no CPU;
// a falling edge starts a scan (one row low at a time) that lasts until all
// keys are released. Matrix, a pure state machine fed with scans and
// timestamps, does the rest: debounce (default 20ms), auto-repeat (500ms,
// then 15/s), ghosting (three keys in a rectangle make a fourth read down on
// a matrix without diodes) and stuck keys.
//
// MultiTap turns key events into text the way phones did: 2 = a b c 2,
// ... 9 = w x y z 9, 0 = space 0, 1 = . , ? ! ' - 1; a pause (default 800ms)
// or another key commits the letter; holding a key types its digit; a case
// key cycles abc / ABC / 123; send, delete and scroll keys are bound by
// Keys (send with nothing typed is SendBlank). Kiosk instead maps keys to canned phrases. Both are pure state
// machines with time passed in, so they are tested on a fake clock; Drive
// runs one on the real clock.
//
// Wiring: see the keypad's datasheet, e.g. the Adafruit 3x4 and 4x4
// membrane keypads, https://learn.adafruit.com/matrix-keypad
package input
