package link

import (
	"regexp"
	"strings"
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
