package fleet

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"sort"
	"strconv"
	"time"

	"termlink/link"
	"termlink/server/events"
	"termlink/server/httpapi"
	"termlink/server/registry"
	"termlink/server/session"
)

// Routes registers the fleet's routes on mux (behind the server's guard).
func (a *API) Routes(mux httpapi.Mux) {
	mux.HandleFunc("GET /api/channels/{channel_id}/events", a.serveEvents)
	mux.HandleFunc("GET /api/channels/{channel_id}/events/stream", a.serveEventStream)
	mux.HandleFunc("GET /api/channels/{channel_id}/peers", a.servePeers)
	mux.HandleFunc("GET /api/channels/{channel_id}/peers/{peer_id}", a.servePeer)
	mux.HandleFunc("POST /api/channels/{channel_id}/peers/{peer_id}/cancel", a.serveCancel)
}

// channelOf answers 404 for an unknown channel.
func (a *API) channelOf(w http.ResponseWriter, r *http.Request) (Channel, bool) {
	id := r.PathValue("channel_id")
	ch, ok := a.channels[id]
	if !ok {
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(id)+" is configured")
	}
	return ch, ok
}

// servePeers is GET /api/channels/{channel_id}/peers?tag=k:v&online=true&limit=N&cursor=C:
// at most limit peers (default 100, at most 1000) in peer id order after
// the cursor, and next_cursor for the next page (null on the last).
// The answer is written a peer at a time.
func (a *API) servePeers(w http.ResponseWriter, r *http.Request) {
	ch, ok := a.channelOf(w, r)
	if !ok {
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
	peers, next := a.d.Registry.Page(ch.ID, f, after, limit)
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = writePeerPage(w, map[string]any{"channel_id": ch.ID}, peers, next)
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
	// Questions are the questions open on the device (read-only here:
	// the person at the device answers).
	Questions []openQuestion `json:"questions"`
}

// openQuestion is a question open on a peer's device, on its page.
type openQuestion struct {
	QuestionID  string        `json:"question_id"`
	MessageID   string        `json:"message_id"`
	Text        string        `json:"text"`
	Options     []link.Option `json:"options"`
	SecondsLeft int           `json:"seconds_left"`
}

// servePeer is GET /api/channels/{channel_id}/peers/{peer_id}.
func (a *API) servePeer(w http.ResponseWriter, r *http.Request) {
	ch, p, ok := a.peerOf(w, r)
	if !ok {
		return
	}
	conv, err := a.conversation(p.SessionID)
	if err != nil {
		a.d.Log.Warn("reading a peer's conversation", "peer_id", p.PeerID, "session", p.SessionID, "err", err)
		httpapi.WriteError(w, http.StatusInternalServerError, "reading the session log of "+p.SessionID+": "+err.Error())
		return
	}
	running := []string{}
	for _, run := range a.d.Runs.PeerRuns(a.peerSession(ch, p.PeerID)) {
		running = append(running, run.MessageID)
	}
	questions := []openQuestion{}
	if a.d.Questions != nil {
		for _, q := range a.d.Questions(ch.ID, p.PeerID, a.peerSession(ch, p.PeerID)) {
			questions = append(questions, openQuestion{QuestionID: q.QuestionID, MessageID: q.MessageID, Text: q.Text,
				Options: q.Options, SecondsLeft: q.TimeoutSeconds})
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, peerDetail{Peer: p, Conversation: conv, Running: running,
		Notices: a.d.Notices.ForPeer(ch.ID, p.PeerID), Questions: questions})
}

// peerSession is the peer's thread-less session id.
func (a *API) peerSession(ch Channel, peerID string) string {
	return a.d.SessionKey(ch.ID, ch.AccountID, peerID, "")
}

func (a *API) peerOf(w http.ResponseWriter, r *http.Request) (Channel, registry.Peer, bool) {
	ch, ok := a.channelOf(w, r)
	if !ok {
		return ch, registry.Peer{}, false
	}
	id := r.PathValue("peer_id")
	p, ok := a.d.Registry.Get(ch.ID, id)
	if !ok {
		httpapi.WriteError(w, http.StatusNotFound, "no peer "+strconv.Quote(id)+" has connected to channel "+ch.ID)
	}
	return ch, p, ok
}

// conversation is the last records of a session log, oldest first.
func (a *API) conversation(key string) ([]conversationEntry, error) {
	out := []conversationEntry{}
	if key == "" {
		return out, nil
	}
	recs, err := a.d.History(key, conversationRecords)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
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

// maxCancelBody bounds a cancel's body ({"message_id": ".."}).
const maxCancelBody = 64 << 10

// serveCancel is POST /api/channels/{channel_id}/peers/{peer_id}/cancel
// {"message_id": ".."}: the device's own cancel, from the operator. With
// no message id (or no body) it cancels what runs now.
func (a *API) serveCancel(w http.ResponseWriter, r *http.Request) {
	ch, p, ok := a.peerOf(w, r)
	if !ok {
		return
	}
	var body struct {
		MessageID string `json:"message_id"`
	}
	if err := httpapi.Decode(r, maxCancelBody, &body); err != nil {
		if errors.Is(err, httpapi.ErrTooLarge) {
			httpapi.DecodeError(w, err)
			return
		}
		httpapi.WriteError(w, http.StatusBadRequest, "request body: want {\"message_id\": \"...\"} (or none): "+err.Error())
		return
	}
	base := a.peerSession(ch, p.PeerID)
	var cancelled []string
	if body.MessageID == "" {
		for _, run := range a.d.Runs.PeerRuns(base) {
			if a.d.Runs.Cancel(run.Session, run.MessageID) {
				cancelled = append(cancelled, run.MessageID)
			}
		}
		if len(cancelled) == 0 {
			httpapi.WriteError(w, http.StatusConflict, "nothing is running for peer "+p.PeerID)
			return
		}
	} else {
		for _, key := range a.d.Runs.PeerSessions(base) {
			if a.d.Runs.Cancel(key, body.MessageID) {
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
		ch.Events.Add(events.Event{Event: EventOperatorCancel, PeerID: p.PeerID, SessionID: base, MessageID: id,
			Detail: "cancelled by " + op.Name + " (" + op.Role.String() + ") through the API"})
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"cancelled": cancelled})
}
