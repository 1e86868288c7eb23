// Package device is termd's core: the conversation and link state a
// terminal device shows (Model), the views that draw it on a character LCD
// (LCDView, through a display.Screen such as display/hd44780) or on a
// VT100 console (ConsoleView, display/console), and the Daemon that wires
// a link.Client to a view and to the device's input (keypad or console).
//
// The screen always shows the link state and, while offline, the seconds
// to the next try and why in short ("unknown CA", "token refused"); the
// send key with nothing typed opens the full reason (the daemon logs it
// once per change, with the next try). What was typed offline is shown queued and goes out on
// reconnect (the client's outbox); while an answer is pending a busy mark
// and the agent's progress text. Long answers are paged with the scroll
// keys: a new answer longer than the screen opens at its first line, and
// the mark '+' says more is below the page, wherever the user pages to
// (also when an answer arrives while the user reads back). An answer the server streams
// (capability stream, on by default in termd) grows on the screen as the
// agent writes it, its newest line in view and a mark at its end (a block
// on the LCD, '▌' on the console) while more is coming; the final reply
// replaces it in place and the page stays where the user is. Cancel
// (Ctrl-C on the console) stops the run mid-stream. An answer is confirmed to the client
// (and leaves the outbox) only after a draw that shows it succeeded, so one
// lost to a crash or a stop is shown by the next start, once; the messages
// still in the outbox at start show as queued. A state dir that cannot be
// written shows as a short label ("disk full") and a '!' mark while
// messages are kept in memory.
//
// A question of an agent (capability choice, listed when the board has
// an input to answer with) takes the screen with its options under their
// keys and the time left; one key (1-9; a number and Enter on the
// console) answers, through the client's outbox like a message, and the
// glass confirms with the option's label (see question.go).
// Daemon.QuestionOpen is told when a question opens and closes.
package device
