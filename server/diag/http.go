package diag

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"termlink/link"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/registry"
)

// The HTTP API's bounds.
const (
	DefaultLogBytes = 16 << 10         // logs?bytes= when not given
	LogsTimeout     = 15 * time.Second // a device's answer to a logs request
	SelftestTimeout = 60 * time.Second // ... to a self-test
	maxSelftestBody = 4 << 10          // the selftest POST's body ({} or none)
)

// Event names (server/events' log of the channel).
const (
	EventLogs     = "diag_logs"     // an operator fetched a device's log (or tried: Detail says)
	EventSelftest = "diag_selftest" // an operator ran a device's self-test
)

// Host is what the API needs of the server.
type Host interface {
	// Channel reports whether a channel is configured and enabled.
	Channel(channelID string) bool
	// Peer is a device as the registry knows it.
	Peer(channelID, peerID string) (registry.Peer, bool)
	// Event adds e to the channel's events.
	Event(channelID string, e events.Event)
	// Operator wraps a handler so only the operator role may call it
	// (a log may hold secrets: reading it is more than viewing).
	Operator(h http.HandlerFunc) http.HandlerFunc
}

// API serves logs and self-tests over HTTP.
type API struct {
	r    *Requests
	host Host
	// Timeouts: LogsTimeout and SelftestTimeout unless set (tests).
	LogsTimeout, SelftestTimeout time.Duration
}

// NewAPI returns the API over r.
func NewAPI(r *Requests, host Host) *API {
	return &API{r: r, host: host, LogsTimeout: LogsTimeout, SelftestTimeout: SelftestTimeout}
}

// Routes registers the API's routes.
func (a *API) Routes(mux httpapi.Mux) {
	mux.HandleFunc("GET /api/channels/{channel_id}/peers/{peer_id}/logs", a.host.Operator(a.serveLogs))
	mux.HandleFunc("POST /api/channels/{channel_id}/peers/{peer_id}/selftest", a.host.Operator(a.serveSelftest))
}

// serveLogs is GET .../logs?bytes=N: the end of the device's log as
// text/plain (N default 16384, at most 65536).
func (a *API) serveLogs(w http.ResponseWriter, r *http.Request) {
	n := DefaultLogBytes
	if s := r.URL.Query().Get("bytes"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > link.MaxDiagBytes {
			httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("bytes must be a whole number from 1 to %d, got %q", link.MaxDiagBytes, httpapi.TruncateUTF8(s, 40)))
			return
		}
		n = v
	}
	res, took, ok := a.request(w, r, link.DiagLogs, n, a.LogsTimeout)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Took", took.String())
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(res.Text))
}

// SelftestAnswer is the answer of POST .../selftest.
type SelftestAnswer struct {
	OK   bool   `json:"ok"`   // every check passed
	Text string `json:"text"` // the report, as termrig selftest -v prints it
	Took string `json:"took"` // from the request to the answer ("1.234s")
}

// serveSelftest is POST .../selftest (body: none or {}).
func (a *API) serveSelftest(w http.ResponseWriter, r *http.Request) {
	var body struct{}
	if err := httpapi.Decode(r, maxSelftestBody, &body); err != nil {
		httpapi.DecodeError(w, err)
		return
	}
	res, took, ok := a.request(w, r, link.DiagSelftest, 0, a.SelftestTimeout)
	if !ok {
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, SelftestAnswer{OK: res.OK, Text: res.Text, Took: took.String()})
}

// request checks the peer, sends the request and waits for the answer,
// answering the errors itself (ok false); every outcome is an event.
func (a *API) request(w http.ResponseWriter, r *http.Request, kind string, bytes int, timeout time.Duration) (_ *link.DiagResult, _ time.Duration, ok bool) {
	ch, peer := r.PathValue("channel_id"), r.PathValue("peer_id")
	if !a.host.Channel(ch) {
		httpapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no channel %q", httpapi.TruncateUTF8(ch, 100)))
		return nil, 0, false
	}
	event := EventLogs
	if kind == link.DiagSelftest {
		event = EventSelftest
	}
	by := httpapi.OperatorOf(r).Name
	fail := func(status int, msg string) {
		a.host.Event(ch, events.Event{Event: event, PeerID: peer, Detail: "by " + by + ": " + msg})
		httpapi.WriteError(w, status, msg)
	}
	p, known := a.host.Peer(ch, peer)
	switch {
	case !known:
		httpapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no peer %q on channel %s", httpapi.TruncateUTF8(peer, 100), ch))
		return nil, 0, false
	case !p.Online:
		fail(http.StatusConflict, fmt.Sprintf("peer %s is not connected", peer))
		return nil, 0, false
	case !slices.Contains(p.Capabilities, link.CapDiag):
		fail(http.StatusConflict, fmt.Sprintf("peer %s does not list the capability %q (termd %s is older than logs and self-tests on demand: update it)", peer, link.CapDiag, orUnknown(p.Version)))
		return nil, 0, false
	}
	outer, gone := context.WithCancelCause(r.Context())
	defer gone(nil)
	ctx, cancel := context.WithTimeoutCause(outer, timeout, errTimeout)
	defer cancel()
	watched := a.watch(ctx, ch, p, gone)
	start := time.Now()
	res, err := a.r.Request(ctx, ch, peer, kind, bytes)
	cancel()
	<-watched
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case errors.Is(err, ErrTooMany):
		fail(http.StatusTooManyRequests, err.Error())
	case errors.Is(err, ErrNotSent):
		fail(http.StatusConflict, fmt.Sprintf("peer %s's connection on this server did not take the request (it went away, is connected to another node, or has too many fleet frames queued)", peer))
	case errors.Is(err, ErrNotConnected): // in a cluster: no node holds it
		fail(http.StatusConflict, fmt.Sprintf("peer %s is not connected", peer))
	case errors.Is(err, ErrRemote): // in a cluster: the node holding it failed
		fail(http.StatusBadGateway, fmt.Sprintf("peer %s: %s", peer, strings.TrimPrefix(err.Error(), "diag: ")))
	case errors.Is(err, errGone):
		fail(http.StatusConflict, fmt.Sprintf("peer %s went away before it answered (its answer is sent on the connection the request came on)", peer))
	case errors.Is(err, errTimeout):
		fail(http.StatusGatewayTimeout, fmt.Sprintf("peer %s did not answer the %s request within %v", peer, kind, timeout))
	case r.Context().Err() != nil:
		a.host.Event(ch, events.Event{Event: event, PeerID: peer, Detail: "by " + by + ": the caller went away"})
	case err != nil:
		fail(http.StatusInternalServerError, err.Error())
	case res.Error != "":
		fail(http.StatusBadGateway, fmt.Sprintf("peer %s: %s", peer, res.Error))
	default:
		detail := fmt.Sprintf("by %s: %d bytes in %v", by, len(res.Text), took)
		if kind == link.DiagSelftest {
			verdict := "FAIL"
			if res.OK {
				verdict = "PASS"
			}
			detail = fmt.Sprintf("by %s: %s in %v", by, verdict, took)
		}
		a.host.Event(ch, events.Event{Event: event, PeerID: peer, Detail: detail})
		return res, took, true
	}
	return nil, 0, false
}

var (
	errTimeout = errors.New("the device did not answer in time")
	errGone    = errors.New("the device's connection went away")
)

// WatchEvery is how often a request waiting for its answer looks whether
// its device is still on the connection it was sent on.
const WatchEvery = 250 * time.Millisecond

// watch cancels ctx (through gone, its parent's) with errGone when the
// peer's connection ends or is replaced before ctx ends: a device answers
// only on the connection a request came on. The channel is closed when
// watch is done.
func (a *API) watch(ctx context.Context, ch string, was registry.Peer, gone context.CancelCauseFunc) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(WatchEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if p, ok := a.host.Peer(ch, was.PeerID); !ok || !p.Online || !sameTime(p.ConnectedSince, was.ConnectedSince) {
				gone(errGone)
				return
			}
		}
	}()
	return done
}

func orUnknown(v string) string {
	if v == "" {
		return "of unknown version"
	}
	return v
}

func sameTime(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
