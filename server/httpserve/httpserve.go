// Package httpserve is the http.Server termserver runs: the limits of
// every plain HTTP request, and net/http's error log admitted through
// the one rule for what strangers can make the server write (package
// throttle).
package httpserve

import (
	"fmt"
	stdlog "log"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"termlink/server/throttle"
)

// Limits bound every plain HTTP request (the API, /healthz, /metrics).
// A WebSocket leaves them behind at the upgrade: the adapter (package
// wschannel) clears the deadlines, and the connection's reader and writer
// set their own.
type Limits struct {
	ReadHeader time.Duration // request line and headers
	Read       time.Duration // the whole request, body included
	Write      time.Duration // from the end of the request headers to the end of the response
	Idle       time.Duration // a keep-alive connection between requests
	HeaderMax  int           // bytes of request headers
	// ErrorEvery is how often, at most, a kind of failure net/http logs
	// per connection (a failed TLS handshake, a failed accept) is logged
	// (ErrorLog).
	ErrorEvery time.Duration
}

// DefaultLimits are what the server uses. Every route answers from
// memory, so a few seconds to write is plenty, but for a release's
// upload and download (package releases), which push the connection's
// deadlines ahead while the body moves; an idle keep-alive connection
// holds a file descriptor and is let go after a minute.
var DefaultLimits = Limits{
	ReadHeader: 10 * time.Second,
	Read:       30 * time.Second,
	Write:      30 * time.Second,
	Idle:       60 * time.Second,
	HeaderMax:  16 << 10,
	ErrorEvery: time.Minute,
}

// New is the http.Server serving h with lim applied. Its error log
// counts repeated failures instead of logging each one (ErrorLog);
// Shutdown logs what is counted.
func New(h http.Handler, lim Limits, log *slog.Logger) *http.Server {
	el := NewErrorLog(log, lim.ErrorEvery)
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    lim.HeaderMax,
		ErrorLog:          stdlog.New(el, "", 0),
	}
	hs.RegisterOnShutdown(el.Close)
	return hs
}

// ErrorLog is http.Server's ErrorLog. net/http logs a line for each
// failed TLS handshake (a scanner, a half-open connection, a client that
// does not trust the certificate) and for each failed accept; anyone who
// can open connections could fill the log with them. ErrorLog admits
// them through the one rule for what strangers can make the server
// write (package throttle): the first of a kind at WARN, then at most
// one line and one summary with the count per every (a minute in
// the server's), whatever the number of addresses. Every other line goes
// to the logger as it comes.
type ErrorLog struct {
	log  *slog.Logger
	gate *throttle.Gate
}

// rateLimitedPrefixes are the net/http lines ErrorLog counts, and
// what it calls them.
var rateLimitedPrefixes = []struct{ prefix, msg string }{
	{"http: TLS handshake error from ", "TLS handshake failed"},
	{"http: Accept error: ", "accepting a connection failed"},
}

// NewErrorLog counts each kind of failure at most once per every.
func NewErrorLog(log *slog.Logger, every time.Duration) *ErrorLog {
	return &ErrorLog{log: log, gate: throttle.New(log, throttle.Options{Burst: 1, KindBurst: 1, Every: every})}
}

// Write takes one line from net/http's log.Logger.
func (e *ErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	for _, k := range rateLimitedPrefixes {
		if detail, ok := strings.CutPrefix(line, k.prefix); ok {
			e.gate.Warn(k.msg, "", k.msg, "detail", detail, "note", fmt.Sprintf("more of these are counted and logged at most once every %v", e.gate.Every()))
			return len(p), nil
		}
	}
	e.log.Warn(throttle.Cut(line, 4096))
	return len(p), nil
}

// Close logs what is counted and not yet logged.
func (e *ErrorLog) Close() { e.gate.Close() }
