package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/registry"
)

// serveEvents is GET /api/channels/{channel_id}/events?limit=N&peer_id=P:
// the newest limit events (default 100), oldest first; with peer_id the
// newest limit of those naming that device.
func (a *API) serveEvents(w http.ResponseWriter, r *http.Request) {
	ch, ok := a.channelOf(w, r)
	if !ok {
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			httpapi.WriteError(w, http.StatusBadRequest, "limit must be a non-negative integer, got "+strconv.Quote(v))
			return
		}
		limit = n
	}
	var evs []events.Event
	if peer := r.URL.Query().Get("peer_id"); peer != "" {
		// One device's events: the newest limit of those naming it.
		all := ch.Events.Recent(-1)
		for i := len(all) - 1; i >= 0 && len(evs) < limit; i-- {
			if all[i].PeerID == peer {
				evs = append(evs, all[i])
			}
		}
		slices.Reverse(evs)
	} else {
		evs = ch.Events.Recent(limit)
	}
	if evs == nil {
		evs = []events.Event{}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"channel_id": ch.ID, "events": evs})
}

// serveEventStream is GET /api/channels/{channel_id}/events/stream, the
// channel's events and its peers' changes as Server-Sent Events: first
// "hello" with the first HelloPeers peers, "total" and "next_cursor" (the
// client pages the rest with GET .../peers?cursor=), then each event as it happens under its own
// name, "peer" with a peer's new state when it changes, and a keepalive
// comment every 15 s. It ends when the client goes, the server shuts
// down, or the client falls behind: StreamBuffer events, or a write that
// makes no progress for StreamWrite (a client that stopped reading; the
// socket's buffers would otherwise hold it for long). It reconnects.
// One admin token holds at most MaxStreamsPerToken streams (429 past
// it), the server at most MaxStreams (503).
func (a *API) serveEventStream(w http.ResponseWriter, r *http.Request) {
	ch, ok := a.channelOf(w, r)
	if !ok {
		return
	}
	op := httpapi.OperatorOf(r).Name
	poll := strings.TrimSuffix(r.URL.Path, "/stream")
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		httpapi.WriteError(w, http.StatusServiceUnavailable, "the server is shutting down")
		return
	}
	if a.streamsBy[op] >= a.opt.MaxStreamsPerToken {
		a.mu.Unlock()
		w.Header().Set("Retry-After", "15")
		httpapi.WriteError(w, http.StatusTooManyRequests, fmt.Sprintf(
			"too many live event streams for admin token %q: it holds %d, the most one token may; close one (another console tab?), or poll %s instead",
			op, a.opt.MaxStreamsPerToken, poll))
		return
	}
	if a.streamsOpen >= a.opt.MaxStreams {
		a.mu.Unlock()
		httpapi.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf(
			"too many live event streams: %d are open, the most this server keeps; close one, or poll %s instead",
			a.opt.MaxStreams, poll))
		return
	}
	a.streamsOpen++
	a.streamsBy[op]++
	a.streamWG.Add(1)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.streamsOpen--
		if a.streamsBy[op]--; a.streamsBy[op] <= 0 {
			delete(a.streamsBy, op)
		}
		a.mu.Unlock()
		a.streamWG.Done()
	}()
	a.streamOpen.Add(ch.ID, 1)
	defer a.streamOpen.Add(ch.ID, -1)

	// Subscribed before the snapshot: nothing falls between them.
	evs := ch.Events.Subscribe(a.opt.StreamBuffer)
	defer evs.Close()
	peers := a.d.Registry.Subscribe(ch.ID, a.opt.StreamBuffer)
	defer peers.Close()

	st := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: a.opt.StreamWrite}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold the stream back
	w.WriteHeader(http.StatusOK)
	first, next := a.d.Registry.Page(ch.ID, registry.Filter{}, "", a.opt.HelloPeers)
	var buf bytes.Buffer
	if writePeerPage(&buf, map[string]any{"channel_id": ch.ID, "total": a.d.Registry.Count(ch.ID)}, first, next) != nil ||
		st.raw("hello", "", bytes.TrimSuffix(buf.Bytes(), []byte("\n"))) != nil {
		return
	}
	keepalive := time.NewTicker(a.opt.StreamKeepalive)
	defer keepalive.Stop()
	var err error
	for err == nil {
		select {
		case e := <-evs.C():
			err = st.event(e.Event, strconv.FormatUint(e.Seq, 10), e)
		case p := <-peers.C():
			err = st.event("peer", "", p)
		case <-keepalive.C:
			err = st.comment("keepalive")
		case <-evs.Done():
			err = errLagged
		case <-peers.Done():
			err = errLagged
		case <-r.Context().Done():
			// net/http cancels a request's context when a write to its
			// connection fails, too: a write that timed out is then the
			// connection's sticky error, and one more write says so (a
			// client that went away gives another error: no drop).
			werr := st.comment("end")
			if !errors.Is(werr, os.ErrDeadlineExceeded) {
				return
			}
			err = werr
		case <-a.streams.Done():
			return
		}
	}
	switch {
	case evs.Lagged() || peers.Lagged(): // also when a write then timed out
		a.streamDropped.Inc(ch.ID)
		a.d.Log.Warn("event stream client fell behind; disconnected (it reconnects)", "channel", ch.ID, "remote", r.RemoteAddr,
			"operator", op, "buffer", a.opt.StreamBuffer)
	case errors.Is(err, os.ErrDeadlineExceeded):
		a.streamDropped.Inc(ch.ID)
		a.d.Log.Warn("event stream client stopped reading: a write made no progress; disconnected (it reconnects)", "channel", ch.ID,
			"remote", r.RemoteAddr, "operator", op, "write_timeout", a.opt.StreamWrite.String())
	}
}

var errLagged = errors.New("the client fell behind")

// sseWriter writes Server-Sent Events, each flushed, each write with a
// deadline (the HTTP server's write timeout is for plain requests).
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte
	enc     bytes.Buffer
}

var sseNameReplacer = strings.NewReplacer("\n", "_", "\r", "_", ":", "_")

func (st *sseWriter) event(name, id string, v any) error {
	st.enc.Reset()
	e := json.NewEncoder(&st.enc)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil { // one line: JSON escapes newlines
		return fmt.Errorf("encoding %s: %w", name, err)
	}
	return st.raw(name, id, bytes.TrimSuffix(st.enc.Bytes(), []byte("\n")))
}

// raw writes an event whose data is one line of JSON.
func (st *sseWriter) raw(name, id string, data []byte) error {
	b := append(st.buf[:0], "event: "...)
	b = append(b, sseNameReplacer.Replace(name)...)
	if id != "" {
		b = append(b, "\nid: "...)
		b = append(b, id...)
	}
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	st.buf = b
	return st.write(b)
}

func (st *sseWriter) comment(text string) error { return st.write([]byte(": " + text + "\n\n")) }

func (st *sseWriter) write(b []byte) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
	if _, err := st.w.Write(b); err != nil {
		return err
	}
	return st.rc.Flush()
}
