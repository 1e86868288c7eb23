package load

import (
	"encoding/json"
	"io"
	"strings"
	"sync"
	"time"
)

// Events of the reconnect log (Options.Reconnects), one JSON object a line.
const (
	// ReconnectDown: a device in use lost its link (Reason: why).
	ReconnectDown = "down"
	// ReconnectFailed: a device that lost its link failed an attempt to
	// get it back (Class and Reason: why); the client waits its backoff
	// and tries again.
	ReconnectFailed = "failed"
	// ReconnectDial: a device that lost its link starts an attempt to get
	// it back (its backoff wait is over).
	ReconnectDial = "dial"
	// ReconnectUp: a device that lost its link has it back (connected).
	ReconnectUp = "up"
)

// Refusal classes of a failed reconnect attempt (ReconnectEvent.Class),
// from the reason link.Client gives.
const (
	RefusedMaxConns = "503-maxconns" // HTTP 503: the server's maxConnections
	RefusedGuard    = "503-guard"    // HTTP 503: ConnGuard found no descriptor
	RefusedHTTP     = "http"         // another HTTP status instead of the upgrade
	RefusedTLS      = "tls"          // the TLS handshake failed (certificate, alert)
	RefusedConnect  = "refused"      // connection refused: nothing listens
	RefusedReset    = "reset"        // the connection was reset or closed (EOF) before connected
	RefusedTimeout  = "timeout"      // no answer within the connect timeout
	RefusedOther    = "other"        // anything else (e.g. an error frame at connect)
)

// ReconnectEvent is one line of the reconnect log.
type ReconnectEvent struct {
	Device int    `json:"device"`
	At     int64  `json:"at_unix_ns"`
	Event  string `json:"event"`
	Class  string `json:"class,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// RefusalClass sorts the reason link.Client gives for a failed attempt
// (link's describeDialError, or the session's reason when the socket
// opened but connected never came) into one of the Refused* classes.
func RefusalClass(reason string) string {
	r := strings.ToLower(reason)
	switch {
	case strings.Contains(r, "http 503") && strings.Contains(r, "maxconnections"):
		return RefusedMaxConns
	case strings.Contains(r, "http 503") && strings.Contains(r, "connection limit"):
		return RefusedGuard
	case strings.Contains(r, "server answered http"):
		return RefusedHTTP
	case strings.Contains(r, "tls") || strings.Contains(r, "certificate") || strings.Contains(r, "x509"):
		return RefusedTLS
	case strings.Contains(r, "connection refused"):
		return RefusedConnect
	case strings.Contains(r, "connection reset") || strings.Contains(r, "broken pipe") ||
		strings.HasSuffix(r, "eof") || strings.Contains(r, "eof:") || strings.Contains(r, "unexpected eof"):
		return RefusedReset
	case strings.Contains(r, "timeout") || strings.Contains(r, "timed out") || strings.Contains(r, "no answer within") ||
		strings.Contains(r, "deadline exceeded"):
		return RefusedTimeout
	}
	return RefusedOther
}

// reconnectLog writes ReconnectEvents as JSON lines, each with one Write
// (unbuffered: a script follows the file while the storm goes on; a few
// events per device cost little next to a TLS handshake); safe for
// concurrent use. A nil *reconnectLog writes nothing.
type reconnectLog struct {
	mu  sync.Mutex
	enc *json.Encoder
	err error // the first write error; later events are dropped
}

func newReconnectLog(w io.Writer) *reconnectLog {
	if w == nil {
		return nil
	}
	return &reconnectLog{enc: json.NewEncoder(w)}
}

func (l *reconnectLog) add(dev int, at time.Time, event, reason string) {
	if l == nil {
		return
	}
	e := ReconnectEvent{Device: dev, At: at.UnixNano(), Event: event, Reason: truncate(reason, 300)}
	if event == ReconnectFailed {
		e.Class = RefusalClass(reason)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = l.enc.Encode(&e)
	}
}

// flush returns the first write error (nothing is buffered).
func (l *reconnectLog) flush() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// truncate cuts s to at most n bytes (on a rune boundary), marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
