package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"termlink/display"
	"termlink/link"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/metrics"
	"termlink/server/registry"
	"termlink/server/session"
)

// The fleet: the device registry, the peers API, the screen mirror and
// the live event stream (issue 13).

// fleetOptions tune the fleet; tests shorten them.
type fleetOptions struct {
	flushInterval   time.Duration // registry write-behind; default registry.DefaultFlushInterval
	streamBuffer    int           // events a stream subscriber may fall behind; default 1024
	streamWrite     time.Duration // a stream write that makes no progress this long ends it; default 10 s
	streamKeepalive time.Duration // default 15 s
	helloPeers      int           // peers in the stream's hello; default helloPeers
	maxStreams      int           // live event streams open at once, server-wide; default maxStreams
	maxPeers        int           // registry bounds per channel; 0: the registry's defaults
	maxAnonymous    int
}

const (
	conversationRecords = 20   // records of the session log on a peer's page
	maxTagSeries        = 1000 // tag series per channel in termserver_devices_online
	eventOperatorCancel = "operator_cancel"
)

// peerNotices is what the peer API needs of the notice mailbox: the
// pending count (notices_pending) and the peer's notices (its page).
type peerNotices interface {
	Count(channelID, peerID string) int
	ForPeer(channelID, peerID string) any // a JSON array
}

// noNotices stands in until the notice mailbox is wired in.
type noNotices struct{}

func (noNotices) Count(string, string) int   { return 0 }
func (noNotices) ForPeer(string, string) any { return []any{} }

type fleet struct {
	reg     *registry.Registry
	notices peerNotices
	opt     fleetOptions
	log     *slog.Logger

	streamOpen    *metrics.GaugeVec
	streamDropped *metrics.CounterVec

	mu       sync.Mutex
	stopped  bool
	streams  context.Context // ends every live stream at shutdown
	stop     context.CancelFunc
	streamWG sync.WaitGroup
	// streamsOpen counts the live event streams (under mu), at most
	// opt.maxStreams.
	streamsOpen int
}

func openFleet(workspace string, opt fleetOptions, noSync bool, log *slog.Logger, m *serverMetrics) (*fleet, error) {
	if opt.streamBuffer <= 0 {
		opt.streamBuffer = 1024
	}
	if opt.streamWrite <= 0 {
		opt.streamWrite = 10 * time.Second
	}
	if opt.streamKeepalive <= 0 {
		opt.streamKeepalive = 15 * time.Second
	}
	if opt.helloPeers <= 0 {
		opt.helloPeers = helloPeers
	}
	if opt.maxStreams <= 0 {
		opt.maxStreams = maxStreams
	}
	fl := &fleet{notices: noNotices{}, opt: opt, log: log}
	reg, err := registry.Open(filepath.Join(workspace, "registry"), registry.Options{
		Logger: log, FlushInterval: opt.flushInterval, NoSync: noSync, MaxPeers: opt.maxPeers, MaxAnonymous: opt.maxAnonymous,
		NoticesPending: func(channelID, peerID string) int { return fl.notices.Count(channelID, peerID) },
	})
	if err != nil {
		return nil, fmt.Errorf("opening the device registry: %w", err)
	}
	fl.reg = reg
	fl.streams, fl.stop = context.WithCancel(context.Background())
	fl.streamOpen = m.reg.NewGaugeVec("termserver_event_streams_open", "Live event streams (/events/stream) open.", "channel")
	fl.streamDropped = m.reg.NewCounterVec("termserver_event_streams_dropped_total", "Live event streams ended because the client fell behind.", "channel")
	return fl, nil
}

// registerMetrics adds termserver_devices_online for the channels. Tag
// series come only from authenticated devices (anonymous ones cannot
// choose labels), at most maxTagSeries per channel; the online devices
// with a tag past it count once under tag="other".
func (fl *fleet) registerMetrics(m *serverMetrics, channels []string) {
	m.reg.NewGaugeSet("termserver_devices_online", "Devices online, per channel and per tag (key=value) of authenticated devices; tag=\"\" counts all, tag=\"other\" the devices with tags past the series cap.",
		[]string{"channel", "tag"}, func(emit func(int64, ...string)) {
			for _, id := range channels {
				total, byTag := fl.reg.Online(id, maxTagSeries)
				emit(int64(total), id, "")
				tags := make([]string, 0, len(byTag))
				for t := range byTag {
					tags = append(tags, t)
				}
				sort.Strings(tags)
				for _, t := range tags {
					emit(int64(byTag[t]), id, t)
				}
			}
		})
}

// stopStreams ends the live streams (they hold HTTP requests open, which
// would hold up the HTTP server's shutdown) and refuses new ones.
func (fl *fleet) stopStreams() {
	fl.mu.Lock()
	fl.stopped = true
	fl.mu.Unlock()
	fl.stop()
}

// close ends the streams, waits for them, and writes the registry.
func (fl *fleet) close() error {
	fl.stopStreams()
	fl.streamWG.Wait()
	return fl.reg.Close()
}

// connected records c's connect in the registry; what the registry
// ignored of it (bad tags, oversized fields) becomes an event. A device
// authenticated when its channel requires a token (configured or learnt
// by enrollment: the connect path checked it) or it showed a client
// certificate. The error is the registry's *registry.FullError for a new
// anonymous device past the channel's bounds.
func (fl *fleet) connected(c *wsConn, f *link.Connect) (uint64, error) {
	a := c.a
	authed := requiresToken(a.cfg.Config) || c.cert.fp != (config.Fingerprint{})
	gen, ignored, err := fl.reg.Connected(registry.Device{ChannelID: a.id, PeerID: c.peerID, SessionID: c.sessionKey,
		DeviceName: f.DeviceName, Board: f.Board, Version: f.Version, Capabilities: f.Capabilities, Tags: f.Tags,
		RemoteAddr: c.remote, Authenticated: authed})
	if err != nil {
		return 0, err
	}
	if len(ignored) > 0 {
		a.ch.events.Add(events.Event{Event: events.InboundRejected, PeerID: c.peerID, SessionID: c.sessionKey,
			Detail: "connect: ignored " + strings.Join(ignored, "; ")})
	}
	return gen, nil
}

// handleScreen takes a screen frame into the registry's mirror; only a
// device that listed "screen" may send one.
func (c *wsConn) handleScreen(f *link.Screen) {
	a := c.a
	switch {
	case c.peerID == "":
		c.reject("", link.CodeNotConnected, "send a connect frame with your peer_id before screen frames")
	case !slices.Contains(c.caps, link.CapScreen):
		// Not an event each: a device that keeps sending them would flood the log.
		a.rt.metrics.rejected.Inc(a.id)
		c.sendError("", link.CodeBadFrame, `screen frame from a device that did not list "screen" in connect.capabilities: ignored`)
	default:
		rom := "" // only a ROM the console can draw; anything else is plain text
		if r, err := display.ParseROM(f.ROM); err == nil && f.ROM != "" {
			rom = r.String()
		}
		a.rt.fleet.reg.SetScreen(a.id, c.peerID, c.regGen, registry.Screen{Rows: f.Rows, ROM: rom,
			CursorRow: f.CursorRow, CursorCol: f.CursorCol, CursorOn: f.CursorOn, Backlight: f.Backlight})
	}
}

// channelOf answers 404 for an unknown channel.
func (s *Server) channelOf(w http.ResponseWriter, r *http.Request) *channel {
	id := r.PathValue("channel_id")
	ch := s.rt.channels[id]
	if ch == nil {
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(id)+" is configured")
	}
	return ch
}

// Pages of the peers API and the live stream's hello.
const (
	defaultPeersLimit = 100
	maxPeersLimit     = 1000
	helloPeers        = 100 // peers in hello; the console pages the rest
	// maxStreams bounds the live event streams open at once: each holds a
	// subscriber's buffer of up to streamBuffer events and peer changes.
	maxStreams = 64
)

// servePeers is GET /api/channels/{channel_id}/peers?tag=k:v&online=true&limit=N&cursor=C:
// at most limit peers (default 100, at most 1000) in peer id order after
// the cursor, and next_cursor for the next page (null on the last).
// The answer is written a peer at a time.
func (s *Server) servePeers(w http.ResponseWriter, r *http.Request) {
	ch := s.channelOf(w, r)
	if ch == nil {
		return
	}
	q := r.URL.Query()
	var f registry.Filter
	var err error
	if f.Tags, err = registry.ParseTagFilter(q["tag"]); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if v := q.Get("online"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil || (v != "true" && v != "false") {
			httpapi.WriteError(w, http.StatusBadRequest, "online must be true or false, got "+strconv.Quote(v))
			return
		}
		f.Online = &b
	}
	limit := defaultPeersLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPeersLimit {
			httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a number from 1 to %d, got %s", maxPeersLimit, strconv.Quote(httpapi.TruncateUTF8(v, 40))))
			return
		}
		limit = n
	}
	after, err := parsePeerCursor(q.Get("cursor"))
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	peers, next := s.rt.fleet.reg.Page(ch.id, f, after, limit)
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = writePeerPage(w, map[string]any{"channel_id": ch.id}, peers, next)
}

// writePeerPage writes {head..., "peers": [...], "next_cursor": ...} on
// one line, a peer at a time (an encoder without HTML escaping, one
// buffer).
func writePeerPage(w io.Writer, head map[string]any, peers []registry.Peer, next string) error {
	bw := bufio.NewWriterSize(w, 32<<10)
	var one bytes.Buffer
	enc := json.NewEncoder(&one)
	enc.SetEscapeHTML(false)
	put := func(v any) error {
		one.Reset()
		if err := enc.Encode(v); err != nil {
			return err
		}
		_, err := bw.Write(bytes.TrimSuffix(one.Bytes(), []byte("\n")))
		return err
	}
	bw.WriteByte('{')
	keys := make([]string, 0, len(head))
	for k := range head {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := put(k); err != nil {
			return err
		}
		bw.WriteByte(':')
		if err := put(head[k]); err != nil {
			return err
		}
		bw.WriteByte(',')
	}
	bw.WriteString(`"peers":[`)
	for i := range peers {
		if i > 0 {
			bw.WriteByte(',')
		}
		if err := put(&peers[i]); err != nil {
			return err
		}
	}
	bw.WriteString(`],"next_cursor":`)
	var cur any
	if next != "" {
		cur = peerCursor(next)
	}
	if err := put(cur); err != nil {
		return err
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

// A cursor is the last peer id of a page, base64url: opaque to clients,
// stable while peers come and go (order is by peer id).
func peerCursor(peerID string) string { return base64.RawURLEncoding.EncodeToString([]byte(peerID)) }

func parsePeerCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) == 0 || len(b) > 256 {
		return "", errors.New("cursor " + strconv.Quote(httpapi.TruncateUTF8(c, 40)) + " is not one this server gave (pass next_cursor of the previous page as it is)")
	}
	return string(b), nil
}

// conversationEntry is one record of a peer's session log on its page.
type conversationEntry struct {
	Role         string  `json:"role"`
	Text         string  `json:"text"`
	MessageID    string  `json:"message_id"`
	FinishReason string  `json:"finish_reason,omitempty"`
	Timestamp    *string `json:"timestamp"`
}

type peerDetail struct {
	registry.Peer
	Conversation []conversationEntry `json:"conversation"`
	Running      []string            `json:"running"`
	Notices      any                 `json:"notices"`
}

// servePeer is GET /api/channels/{channel_id}/peers/{peer_id}.
func (s *Server) servePeer(w http.ResponseWriter, r *http.Request) {
	ch, p, ok := s.peerOf(w, r)
	if !ok {
		return
	}
	conv, err := s.conversation(p.SessionID)
	if err != nil {
		s.log.Warn("reading a peer's conversation", "peer_id", p.PeerID, "session", p.SessionID, "err", err)
		httpapi.WriteError(w, http.StatusInternalServerError, "reading the session log of "+p.SessionID+": "+err.Error())
		return
	}
	var running []string
	for _, run := range s.router.peerRuns(SessionKey(ch.id, ch.cfg.AccountID, p.PeerID, "")) {
		running = append(running, run.messageID)
	}
	httpapi.WriteJSON(w, http.StatusOK, peerDetail{Peer: p, Conversation: conv, Running: nonNil(running),
		Notices: s.rt.fleet.notices.ForPeer(ch.id, p.PeerID)})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (s *Server) peerOf(w http.ResponseWriter, r *http.Request) (*channel, registry.Peer, bool) {
	ch := s.channelOf(w, r)
	if ch == nil {
		return nil, registry.Peer{}, false
	}
	id := r.PathValue("peer_id")
	p, ok := s.rt.fleet.reg.Get(ch.id, id)
	if !ok {
		httpapi.WriteError(w, http.StatusNotFound, "no peer "+strconv.Quote(id)+" has connected to channel "+ch.id)
	}
	return ch, p, ok
}

// conversation is the last records of a session log, oldest first.
func (s *Server) conversation(key string) ([]conversationEntry, error) {
	out := []conversationEntry{}
	if key == "" {
		return out, nil
	}
	sess, err := s.rt.sessions.Tail(key, conversationRecords)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, rec := range sess.Records {
		if rec.Role != "user" && rec.Role != "assistant" {
			continue
		}
		e := conversationEntry{Role: rec.Role, Text: rec.Content, MessageID: rec.MessageID, FinishReason: rec.FinishReason}
		if t, err := time.ParseInLocation(session.TimeLayout, rec.Timestamp, time.Local); err == nil {
			ts := t.UTC().Format(time.RFC3339)
			e.Timestamp = &ts
		}
		out = append(out, e)
	}
	if len(out) > conversationRecords {
		out = out[len(out)-conversationRecords:]
	}
	return out, nil
}

type peerRun struct{ session, messageID string }

// peerRuns lists the runs in progress in every session of the peer whose
// session id (thread-less) is base: its own and its threads'.
func (r *router) peerRuns(base string) []peerRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []peerRun
	for key, q := range r.queues {
		if key != base && !strings.HasPrefix(key, base+":") {
			continue
		}
		if q.running != "" {
			out = append(out, peerRun{key, q.running})
		}
		for _, j := range q.joined {
			out = append(out, peerRun{key, j.MessageID})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].messageID < out[j].messageID })
	return out
}

// peerSessions lists the peer's sessions with queued or running work.
func (r *router) peerSessions(base string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{base}
	for key := range r.queues {
		if strings.HasPrefix(key, base+":") {
			out = append(out, key)
		}
	}
	sort.Strings(out[1:])
	return out
}

// serveCancel is POST /api/channels/{channel_id}/peers/{peer_id}/cancel
// {"message_id": ".."}: the device's own cancel, from the operator. With
// no message id it cancels what runs now.
func (s *Server) serveCancel(w http.ResponseWriter, r *http.Request) {
	ch, p, ok := s.peerOf(w, r)
	if !ok {
		return
	}
	var body struct {
		MessageID string `json:"message_id"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		httpapi.WriteError(w, http.StatusBadRequest, "request body: want {\"message_id\": \"...\"} (or none): "+err.Error())
		return
	}
	base := SessionKey(ch.id, ch.cfg.AccountID, p.PeerID, "")
	var cancelled []string
	if body.MessageID == "" {
		for _, run := range s.router.peerRuns(base) {
			if s.router.cancel(run.session, run.messageID) {
				cancelled = append(cancelled, run.messageID)
			}
		}
		if len(cancelled) == 0 {
			httpapi.WriteError(w, http.StatusConflict, "nothing is running for peer "+p.PeerID)
			return
		}
	} else {
		for _, key := range s.router.peerSessions(base) {
			if s.router.cancel(key, body.MessageID) {
				cancelled = append(cancelled, body.MessageID)
				break
			}
		}
		if len(cancelled) == 0 {
			httpapi.WriteError(w, http.StatusNotFound, "message "+strconv.Quote(body.MessageID)+" is not queued or running for peer "+p.PeerID)
			return
		}
	}
	op := httpapi.OperatorOf(r)
	for _, id := range cancelled {
		ch.events.Add(events.Event{Event: eventOperatorCancel, PeerID: p.PeerID, SessionID: base, MessageID: id,
			Detail: "cancelled by " + op.Name + " (" + op.Role.String() + ") through the API"})
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"cancelled": cancelled})
}

// serveEventStream is GET /api/channels/{channel_id}/events/stream, the
// channel's events and its peers' changes as Server-Sent Events: first
// "hello" with the first helloPeers peers, "total" and "next_cursor" (the
// client pages the rest with GET .../peers?cursor=), then each event as it happens under its own
// name, "peer" with a peer's new state when it changes, and a keepalive
// comment every 15 s. It ends when the client goes, the server shuts
// down, or the client falls streamBuffer events behind (it reconnects).
func (s *Server) serveEventStream(w http.ResponseWriter, r *http.Request) {
	ch := s.channelOf(w, r)
	if ch == nil {
		return
	}
	fl := s.rt.fleet
	fl.mu.Lock()
	if fl.stopped {
		fl.mu.Unlock()
		httpapi.WriteError(w, http.StatusServiceUnavailable, "the server is shutting down")
		return
	}
	if fl.streamsOpen >= fl.opt.maxStreams {
		fl.mu.Unlock()
		httpapi.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf(
			"too many live event streams: %d are open, the most this server keeps; close one, or poll %s instead",
			fl.opt.maxStreams, strings.TrimSuffix(r.URL.Path, "/stream")))
		return
	}
	fl.streamsOpen++
	fl.streamWG.Add(1)
	fl.mu.Unlock()
	defer func() {
		fl.mu.Lock()
		fl.streamsOpen--
		fl.mu.Unlock()
		fl.streamWG.Done()
	}()
	fl.streamOpen.Add(ch.id, 1)
	defer fl.streamOpen.Add(ch.id, -1)

	// Subscribed before the snapshot: nothing falls between them.
	evs := ch.events.Subscribe(fl.opt.streamBuffer)
	defer evs.Close()
	peers := fl.reg.Subscribe(ch.id, fl.opt.streamBuffer)
	defer peers.Close()

	st := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: fl.opt.streamWrite}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold the stream back
	w.WriteHeader(http.StatusOK)
	first, next := fl.reg.Page(ch.id, registry.Filter{}, "", fl.opt.helloPeers)
	var buf bytes.Buffer
	if writePeerPage(&buf, map[string]any{"channel_id": ch.id, "total": fl.reg.Count(ch.id)}, first, next) != nil ||
		st.raw("hello", "", bytes.TrimSuffix(buf.Bytes(), []byte("\n"))) != nil {
		return
	}
	keepalive := time.NewTicker(fl.opt.streamKeepalive)
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
			return
		case <-fl.streams.Done():
			return
		}
	}
	if evs.Lagged() || peers.Lagged() { // also when a write then timed out
		fl.streamDropped.Inc(ch.id)
		s.log.Warn("event stream client fell behind; disconnected (it reconnects)", "channel", ch.id, "remote", r.RemoteAddr,
			"buffer", fl.opt.streamBuffer)
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
