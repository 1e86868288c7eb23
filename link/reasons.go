package link

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxShortReason is the longest ShortReason: it fits the text field of a
// 16x2 character display beside the 3-cell status field.
const MaxShortReason = 13

// shortReasons maps the offline reasons this package writes (see
// describeDialError, describeTLSError, describeIOError and the session's
// handshake) to a short form, first match wins.
var shortReasons = []struct {
	has   []string // every one must be in the reason
	short string
}{
	// The server's certificate (certmsg, "server certificate ...").
	{[]string{"server certificate is signed by an unknown authority"}, "unknown CA"},
	{[]string{"server certificate expired on"}, "cert expired"},
	{[]string{"server certificate is not valid before"}, "check clock"},
	{[]string{"server certificate is for "}, "cert for host"},
	{[]string{"server certificate cannot be verified"}, "no root CAs"},
	{[]string{"server certificate"}, "bad cert"},
	{[]string{"refused the TLS handshake"}, "TLS refused"},
	{[]string{"does not look like a TLS handshake"}, "not TLS"},
	// A cluster edge cut off from NATS (HTTP 503 or close 1013): the
	// device goes to another of its URLs.
	{[]string{"lost the NATS cluster"}, "no cluster"},
	// HTTP answers to the upgrade.
	{[]string{"HTTP 401", "client certificate"}, "cert needed"},
	{[]string{"HTTP 401", "mutual TLS"}, "cert needed"},
	{[]string{"HTTP 401"}, "token refused"},
	{[]string{"HTTP 403", "revoked"}, "cert revoked"},
	{[]string{"HTTP 403"}, "cert refused"},
	{[]string{"HTTP 404"}, "no channel"},
	{[]string{"HTTP 503"}, "server busy"},
	// A refusal the server sent in an error frame, or a close code.
	{[]string{"connect refused: certificate is for peer"}, "peer mismatch"},
	{[]string{"connect refused"}, "refused"},
	{[]string{"(4003)"}, "token refused"},
	{[]string{"(4001)"}, "replaced"},
	{[]string{"server closed the connection"}, "server closed"},
	{[]string{"server: "}, "refused"},
	// The network.
	{[]string{"connection refused"}, "no server"},
	{[]string{"no such host"}, "unknown host"},
	{[]string{"network is unreachable"}, "no network"},
	{[]string{"no route to host"}, "no route"},
	{[]string{"no answer within the connect timeout"}, "no answer"},
	{[]string{"no connected frame within"}, "no answer"},
	{[]string{"no frame from the server"}, "link dead"},
	{[]string{"write did not finish"}, "link dead"},
	{[]string{"connection reset"}, "link reset"},
	{[]string{"server did not take message"}, "server error"},
}

var httpStatus = regexp.MustCompile(`HTTP (\d{3})`)

// ShortReason gives the short form (at most MaxShortReason characters)
// of an offline reason from Event.Reason or Status.Reason: "unknown CA",
// "token refused", "peer mismatch", "no server", "HTTP 502" ...; "" for
// "". A reason it does not know is "offline".
func ShortReason(reason string) string {
	if reason == "" {
		return ""
	}
	for _, r := range shortReasons {
		all := true
		for _, h := range r.has {
			if !strings.Contains(reason, h) {
				all = false
				break
			}
		}
		if all {
			return r.short
		}
	}
	if m := httpStatus.FindStringSubmatch(reason); m != nil {
		return "HTTP " + m[1]
	}
	return "offline"
}

// MaxGlassReason is the longest GlassReason, in runes.
const MaxGlassReason = 160

// httpAnswer is a server's answer to the upgrade in a reason (see
// describeDialError): its code, its status text and its body.
var httpAnswer = regexp.MustCompile(`(?s)(?:dial: )?server answered HTTP (\d{3})([^:]*)(?::.*)?$`)

// GlassReason is the one-line form of an offline reason for a screen: the
// page the user opens to read why the link is offline, on an LCD or a
// console. It is the reason as logged, but a server's answer to the
// upgrade shows as its status and short reason ("server: 404 not found
// (no channel)"), never the server's body (JSON, HTML, text: the log has
// it); spaces and line breaks are one space, and it is cut to
// MaxGlassReason runes.
func GlassReason(reason string) string {
	if m := httpAnswer.FindStringSubmatchIndex(reason); m != nil {
		code := reason[m[2]:m[3]]
		g := "server: " + code
		if text := strings.ToLower(strings.Join(strings.Fields(reason[m[4]:m[5]]), " ")); text != "" {
			g += " " + text
		}
		if short := ShortReason(reason); short != "HTTP "+code && short != "offline" {
			g += " (" + short + ")"
		}
		reason = reason[:m[0]] + g
	}
	reason = strings.Join(strings.Fields(strings.ToValidUTF8(reason, "?")), " ")
	if utf8.RuneCountInString(reason) > MaxGlassReason {
		reason = string([]rune(reason)[:MaxGlassReason-3]) + "..."
	}
	return reason
}
