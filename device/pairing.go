package device

import (
	"context"
	"net/url"
	"time"
)

// ShowPairing draws the enrollment screen on v: the pairing code an
// operator approves and where (the server's console URL, its host and
// port on a character display):
//
//	Pair: K7Q-4MX
//	10.0.0.5:8080
//
// On a console it is a line of the conversation and the status line.
// termd shows it before it has a token, so before the Daemon runs.
func ShowPairing(ctx context.Context, v View, code, verificationURI string) error {
	where := verificationURI
	if u, err := url.Parse(verificationURI); err == nil && u.Host != "" {
		where = u.Host
	}
	m := &Model{}
	m.Notice("Pairing code " + code + ": an operator approves it at " + verificationURI)
	m.Overlay = Overlay{Kind: OverlayNotice, Text: "Pair: " + code + "\n" + where}
	return v.Render(ctx, m, time.Now())
}

// ShowEnrollStatus draws a short line about enrollment (e.g. "Enroll:
// no server") on v.
func ShowEnrollStatus(ctx context.Context, v View, text string) error {
	m := &Model{}
	m.Notice(text)
	m.Overlay = Overlay{Kind: OverlayNotice, Text: text}
	return v.Render(ctx, m, time.Now())
}
