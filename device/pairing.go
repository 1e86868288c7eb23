package device

import (
	"context"
	"net/url"
	"time"

	"termlink/link"
)

// ShowPairing draws the enrollment screen on v: the pairing code an
// operator approves and where (the server's console URL, its host and
// port on a character display):
//
//	Pair: K7Q-4MX
//	10.0.0.5:8080
//
// On a console it is the status line ("Pairing code K7Q-4MX: an operator
// approves it at URL"), which the next screen replaces: no line of the
// conversation keeps a code that is used up. termd shows it before it has
// a token, so before the Daemon runs.
func ShowPairing(ctx context.Context, v View, code, verificationURI string) error {
	where := verificationURI
	if u, err := url.Parse(verificationURI); err == nil && u.Host != "" {
		where = u.Host
	}
	text := "Pair: " + code + "\n" + where
	if _, ok := v.(*ConsoleView); ok {
		text = "Pairing code " + code + ": an operator approves it at " + verificationURI
	}
	m := &Model{Link: link.StateConnecting}
	m.Overlay = Overlay{Kind: OverlayNotice, Text: text}
	return v.Render(ctx, m, time.Now())
}

// ShowEnrollStatus draws a short line about enrollment (e.g. "Enroll:
// no server") on v, over the whole screen (a console: its status line).
func ShowEnrollStatus(ctx context.Context, v View, text string) error {
	m := &Model{Link: link.StateConnecting}
	m.Overlay = Overlay{Kind: OverlayNotice, Text: text}
	return v.Render(ctx, m, time.Now())
}
