// Package console is a chat screen for VT100/ANSI terminals, driven over
// any io.ReadWriter: a serial port (see OpenSerial, which survives the USB
// adapter being unplugged) or the process's own terminal in raw mode (see
// OpenTTY, MakeRaw).
//
// The screen has three parts:
//
//	+------------------------------------------+
//	| > what is the weather?                   |  conversation: scrolls,
//	| Sunny, 21 degrees.                       |  wrapped to the width
//	|                                          |
//	|connected                         thinking|  status line (reverse)
//	|> next question_                          |  input line
//	+------------------------------------------+
//
// Only VT100 sequences are written (CUP, EL, ED, DECSTBM, SGR bold, dim and
// reverse, DECSC/DECRC and the cursor position report), so it works under
// picocom, minicom, screen and any xterm. Text is UTF-8 both ways; a
// character split across reads is decoded once it is complete. A lone ESC
// is the Escape key once the input has been quiet for EscDelay (50 ms), as
// in terminals; ReadKeys reads keys that way for other programs too.
//
// The input line is edited in place: printable characters, Backspace (DEL
// or BS), Delete, Left/Right (ESC [ C/D and ESC O C/D), Home/End, Up/Down
// through the history, Ctrl-U (kill to the start of the line), Ctrl-W (kill
// the previous word), Ctrl-K (kill to the end), Ctrl-L (redraw). Enter (CR,
// LF or CRLF, each counted once) submits the line. Ctrl-C and Ctrl-D (on
// an empty line) are reported as events. The Console does not echo a
// submitted line into the conversation: the caller adds it with
// AddMessage(RoleUser, ...) when it has accepted it.
//
// Output never blocks a caller: drawing is queued (bounded) for one writer
// goroutine, which uses write deadlines when the terminal has them; when
// the terminal stalls, the queue is dropped and the screen repainted once
// it catches up.
//
// Reference: DEC VT100 User Guide, chapter 3, "Programming Information",
// https://vt100.net/docs/vt100-ug/chapter3.html
package console
