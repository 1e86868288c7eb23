package server

import (
	stdlog "log"
	"log/slog"
	"net/http"
	"time"

	"termlink/server/fdbudget"
)

// httpLimits bound every plain HTTP request (the API, /healthz, /metrics).
// A WebSocket leaves them behind at the upgrade: the adapter (package
// wschannel) clears the deadlines, and the connection's reader and writer
// set their own.
type httpLimits struct {
	ReadHeader time.Duration // request line and headers
	Read       time.Duration // the whole request, body included
	Write      time.Duration // from the end of the request headers to the end of the response
	Idle       time.Duration // a keep-alive connection between requests
	HeaderMax  int           // bytes of request headers
	// ErrorEvery is how often, at most, a kind of failure net/http logs
	// per connection (a failed TLS handshake, a failed accept) is logged
	// (tls.go, httpErrorLog).
	ErrorEvery time.Duration
}

// defaultHTTPLimits are what Serve uses. Every route answers from memory,
// so a few seconds to write is plenty, but for a release's upload and
// download (package releases), which push the connection's deadlines
// ahead while the body moves; an idle keep-alive connection holds a file
// descriptor and is let go after a minute.
var defaultHTTPLimits = httpLimits{
	ReadHeader: 10 * time.Second,
	Read:       30 * time.Second,
	Write:      30 * time.Second,
	Idle:       60 * time.Second,
	HeaderMax:  16 << 10,
	ErrorEvery: time.Minute,
}

// newHTTPServer is the http.Server Serve runs, with lim applied.
// Its error log counts repeated failures instead of logging each one
// (httpErrorLog); Shutdown logs what is counted.
func newHTTPServer(h http.Handler, lim httpLimits, log *slog.Logger) *http.Server {
	el := newHTTPErrorLog(log, lim.ErrorEvery)
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

// maxConnections is the cap on open WebSockets: configured when > 0,
// else what the descriptor budget keeps for sockets whatever the agents
// and session files hold (its floor) less room for plain HTTP requests
// (a sixteenth, at least 16): 754 at nofile 1024. So /healthz and the
// API still answer when devices hold every WebSocket they may and the
// agents all they may. Past the cap a device gets 503 before it costs
// anything (wschannel); the connection guard (wschannel.ConnGuard)
// refuses any connection the budget has no descriptor for.
func maxConnections(configured int, fds *fdbudget.Budget) int64 {
	if configured > 0 {
		return int64(configured)
	}
	n := fds.Floor(fdbudget.Sockets)
	return int64(max(16, n-max(16, n/16)))
}

// fdSeries exports the descriptor budget: the limit, what each class
// holds now, how often each was refused one, and the agent starts
// waiting for theirs (the agents' ceiling queues runs past it).
func (m *serverMetrics) fdSeries(b *fdbudget.Budget) {
	r := &m.reg
	r.NewGaugeFunc("termlink_fd_limit", "The process's file descriptor limit (soft RLIMIT_NOFILE at start).", func() float64 { return float64(b.Limit()) })
	for _, c := range []struct {
		class fdbudget.Class
		name  string
	}{{fdbudget.Sockets, "sockets"}, {fdbudget.Files, "session_files"}, {fdbudget.Agents, "agents"}} {
		r.NewGaugeFunc("termlink_fd_"+c.name, "File descriptors held by "+c.class.String()+" (descriptor budget).",
			func() float64 { return float64(b.Stats().Used[c.class]) })
		r.NewCounterFunc("termlink_fd_"+c.name+"_refused_total", "Times "+c.class.String()+" found no file descriptor left in the budget.",
			func() float64 { return float64(b.Stats().Refused[c.class]) })
	}
	r.NewGaugeFunc("termlink_fd_agents_waiting", "Agent starts waiting for their descriptors: the agents hold all the budget lets them (descriptor budget).",
		func() float64 { return float64(b.Stats().Waiting[fdbudget.Agents]) })
}
