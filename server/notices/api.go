package notices

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"termlink/link"
	"termlink/server/httpapi"
)

// Limits and defaults of a notice (the operator API and agent pushes).
const (
	// MaxTextChars is the longest notice text: a kiosk shows a few lines;
	// longer text is refused (an agent's is cut).
	MaxTextChars = 1000
	// MaxBodyBytes is the largest POST body: a broadcast may list many
	// peers.
	MaxBodyBytes          = 4 << 20
	maxNoticeTargets      = 100000
	maxDisplaySeconds     = 3600
	maxNoticeTTL          = 30 * 24 * time.Hour
	defaultDisplaySeconds = 15
	defaultNoticeTTL      = 24 * time.Hour
)

// noticeRequest is a parsed POST body.
type noticeRequest struct {
	spec  Spec
	peers []string          // broadcast: the peers selector
	tags  map[string]string // broadcast: the tags selector
}

// peerIDRE is what a peer id may be (package server's idRE, the device
// wire's rule).
var peerIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)

var noticeKeys = []string{"text", "priority", "display_seconds", "expires_at", "ttl_seconds"}

// parseNoticeRequest parses and checks a POST body; broadcast allows the
// peers and tags selectors. Every error names the field. The body policy
// is the device wire's (httpapi.CheckBody): invalid UTF-8 or a key given
// twice is refused, never replaced or overwritten.
func parseNoticeRequest(body []byte, broadcast bool, now time.Time) (noticeRequest, error) {
	var req noticeRequest
	if err := httpapi.CheckBody(body); err != nil {
		return req, err
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil || raw == nil {
		if err == nil {
			err = errors.New("null")
		}
		return req, fmt.Errorf("the body must be a JSON object like {\"text\": \"...\"}: %v", err)
	}
	if dec.More() {
		return req, errors.New("the body must be one JSON object; something follows it")
	}
	known := noticeKeys
	if broadcast {
		known = append(known[:len(known):len(known)], "peers", "tags")
	}
	for k := range raw {
		if !slices.Contains(known, k) {
			if !broadcast && (k == "peers" || k == "tags") {
				return req, fmt.Errorf("field %q selects peers on the broadcast route POST /api/channels/{channel_id}/notices; this route's peer is in the path", k)
			}
			return req, fmt.Errorf("unknown field %q (known: %s)", k, strings.Join(known, ", "))
		}
	}
	sp := &req.spec
	sp.Source, sp.Priority, sp.DisplaySeconds = "api", link.PriorityInfo, defaultDisplaySeconds
	if err := jsonField(raw, "text", &sp.Text, "a string"); err != nil {
		return req, err
	}
	switch n := utf8.RuneCountInString(sp.Text); {
	case strings.TrimSpace(sp.Text) == "":
		return req, errors.New(`field "text" is missing or blank`)
	case n > MaxTextChars:
		return req, fmt.Errorf(`field "text" is %d characters; a notice holds at most %d`, n, MaxTextChars)
	}
	if _, has := raw["priority"]; has {
		if err := jsonField(raw, "priority", &sp.Priority, "a string"); err != nil {
			return req, err
		}
		if sp.Priority != link.PriorityInfo && sp.Priority != link.PriorityAlert {
			return req, fmt.Errorf(`field "priority" must be "info" or "alert", not %q`, sp.Priority)
		}
	}
	if _, has := raw["display_seconds"]; has {
		n, err := intField(raw, "display_seconds", 1, maxDisplaySeconds)
		if err != nil {
			return req, err
		}
		sp.DisplaySeconds = n
	}
	_, hasExp := raw["expires_at"]
	_, hasTTL := raw["ttl_seconds"]
	switch {
	case hasExp && hasTTL:
		return req, errors.New(`give "expires_at" or "ttl_seconds", not both`)
	case hasExp:
		var s string
		if err := jsonField(raw, "expires_at", &s, "an RFC 3339 time string"); err != nil {
			return req, err
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return req, fmt.Errorf(`field "expires_at" must be an RFC 3339 time like "2026-11-23T18:00:00Z": %q`, s)
		}
		if !t.After(now) {
			return req, fmt.Errorf(`field "expires_at" %s is not in the future`, s)
		}
		if t.Sub(now) > maxNoticeTTL {
			return req, fmt.Errorf(`field "expires_at" %s is more than %d days ahead`, s, int(maxNoticeTTL/(24*time.Hour)))
		}
		sp.ExpiresAt = t
	case hasTTL:
		n, err := intField(raw, "ttl_seconds", 1, int(maxNoticeTTL/time.Second))
		if err != nil {
			return req, err
		}
		sp.ExpiresAt = now.Add(time.Duration(n) * time.Second)
	default:
		sp.ExpiresAt = now.Add(defaultNoticeTTL)
	}
	if !broadcast {
		return req, nil
	}
	_, hasPeers := raw["peers"]
	_, hasTags := raw["tags"]
	switch {
	case hasPeers && hasTags:
		return req, errors.New(`give one selector, "peers" or "tags" (or neither, for every peer), not both`)
	case hasPeers:
		if err := jsonField(raw, "peers", &req.peers, "an array of peer id strings"); err != nil {
			return req, err
		}
		if len(req.peers) == 0 || len(req.peers) > maxNoticeTargets {
			return req, fmt.Errorf(`field "peers" must list 1 to %d peer ids (leave it out for every peer)`, maxNoticeTargets)
		}
		seen := make(map[string]bool, len(req.peers))
		for i, p := range req.peers {
			if !peerIDRE.MatchString(p) {
				return req, fmt.Errorf(`field "peers"[%d]: %q is not a peer id (1-128 characters of A-Z a-z 0-9 . _ @ + -, starting with a letter or digit)`, i, p)
			}
			if seen[p] {
				return req, fmt.Errorf(`field "peers" lists %q twice`, p)
			}
			seen[p] = true
		}
	case hasTags:
		if err := jsonField(raw, "tags", &req.tags, `an object of strings like {"site": "lobby"}`); err != nil {
			return req, err
		}
		if len(req.tags) == 0 {
			return req, errors.New(`field "tags" is empty (leave it out for every peer)`)
		}
		for k := range req.tags {
			if k == "" {
				return req, errors.New(`field "tags" has an empty key`)
			}
		}
	}
	return req, nil
}

// jsonField decodes raw[key] into v; null counts as a wrong type.
func jsonField(raw map[string]json.RawMessage, key string, v any, want string) error {
	msg, has := raw[key]
	if !has {
		return fmt.Errorf("field %q is missing", key)
	}
	if bytes.Equal(bytes.TrimSpace(msg), []byte("null")) || json.Unmarshal(msg, v) != nil {
		return fmt.Errorf("field %q must be %s, not %s", key, want, noticePreview(string(msg), 40))
	}
	return nil
}

func intField(raw map[string]json.RawMessage, key string, lo, hi int) (int, error) {
	var num json.Number
	if err := jsonField(raw, key, &num, "a whole number"); err != nil {
		return 0, err
	}
	if m := bytes.TrimSpace(raw[key]); len(m) > 0 && m[0] == '"' { // json.Number takes "5" too
		return 0, fmt.Errorf("field %q must be a whole number, not %s", key, noticePreview(string(m), 40))
	}
	n, err := strconv.Atoi(num.String())
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("field %q must be a whole number from %d to %d, not %s", key, lo, hi, num)
	}
	return n, nil
}

func noticePreview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return httpapi.TruncateUTF8(s, n) + "…"
}

// Store is what the notice API needs of a mailboxes implementation: the
// operator's methods. Service implements it.
type Store interface {
	// Create puts a new notice in the mailboxes of peers (no
	// duplicates); a peer whose mailbox is full is skipped, and when
	// every peer is, the error is a *MailboxFullError.
	Create(channelID string, peers []string, sp Spec) (Created, error)
	// Withdraw withdraws notice id from peer ("" = every peer) where it
	// is not yet acked; it returns how many deliveries it withdrew, and
	// ErrUnknownNotice for a notice (or peer) it does not know.
	Withdraw(channelID, noticeID, peerID string) (int, error)
	// List is the channel's notices with an open delivery (all: every
	// notice kept), oldest first, with every peer's state.
	List(channelID string, all bool) []Notice
	// ListPeer is peer's open notices (all: every one kept), oldest first.
	ListPeer(channelID, peerID string, all bool) []PeerNotice
}

// API is the notice routes over a Store.
type API struct {
	store     Store
	directory PeerDirectory
	channel   func(channelID string) (configured, enabled bool)
	log       *slog.Logger
}

// NewAPI serves s's notices; of opt it takes Directory, Channel and
// Logger (nil: Open's defaults).
func NewAPI(s Store, opt Options) *API {
	a := &API{store: s, directory: opt.Directory, channel: opt.Channel, log: opt.Logger}
	if a.directory == nil {
		a.directory = noPeers{}
	}
	if a.channel == nil {
		a.channel = func(string) (bool, bool) { return true, true }
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	return a
}

// Routes adds the notice API to mux; the server's operator guard covers
// it (GET: viewer, POST and DELETE: operator).
func (ns *API) Routes(mux httpapi.Mux) {
	mux.HandleFunc("POST /api/channels/{channel_id}/peers/{peer_id}/notices", ns.postNotice)
	mux.HandleFunc("GET /api/channels/{channel_id}/peers/{peer_id}/notices", ns.getNotices)
	mux.HandleFunc("DELETE /api/channels/{channel_id}/peers/{peer_id}/notices/{notice_id}", ns.deleteNotice)
	mux.HandleFunc("POST /api/channels/{channel_id}/notices", ns.postNotice)
	mux.HandleFunc("GET /api/channels/{channel_id}/notices", ns.getNotices)
	mux.HandleFunc("DELETE /api/channels/{channel_id}/notices/{notice_id}", ns.deleteNotice)
}

// noticeChannel finds the channel of a notice route, answering for a
// missing one.
func (ns *API) noticeChannel(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("channel_id")
	configured, enabled := ns.channel(id)
	switch {
	case !configured:
		httpapi.WriteError(w, http.StatusNotFound, "no channel "+strconv.Quote(id)+" is configured")
		return "", false
	case !enabled:
		httpapi.WriteError(w, http.StatusConflict, "channel "+strconv.Quote(id)+" is disabled: it takes no notices")
		return "", false
	}
	if p := r.PathValue("peer_id"); p != "" && !peerIDRE.MatchString(p) {
		httpapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("%q is not a peer id (1-128 characters of A-Z a-z 0-9 . _ @ + -, starting with a letter or digit)", p))
		return "", false
	}
	return id, true
}

// postNotice creates a notice: for the path's peer, or (broadcast) for
// the peers the body selects.
func (ns *API) postNotice(w http.ResponseWriter, r *http.Request) {
	chID, ok := ns.noticeChannel(w, r)
	if !ok {
		return
	}
	peer := r.PathValue("peer_id")
	broadcast := peer == ""
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			httpapi.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
			return
		}
		httpapi.WriteError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	req, err := parseNoticeRequest(body, broadcast, time.Now())
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	targets := []string{peer}
	if broadcast {
		targets = req.peers
		if targets == nil {
			targets = ns.directory.PeersWithTags(chID, req.tags)
		}
		if len(targets) == 0 {
			what := "knows no peers yet"
			if len(req.tags) > 0 {
				what = "has no known peer with tags " + formatTags(req.tags)
			}
			httpapi.WriteError(w, http.StatusNotFound, "channel "+strconv.Quote(chID)+" "+what)
			return
		}
	}
	res, err := ns.store.Create(chID, targets, req.spec)
	var full *MailboxFullError
	switch {
	case errors.As(err, &full):
		httpapi.WriteError(w, http.StatusTooManyRequests, err.Error())
		return
	case err != nil:
		ns.log.Error("notice not created", "channel", chID, "err", err)
		httpapi.WriteError(w, http.StatusServiceUnavailable, "the notice was not stored: "+err.Error())
		return
	}
	out := map[string]any{"notice_ids": []string{res.NoticeID}, "targets": len(res.Targets), "online": res.Online}
	if broadcast {
		out["skipped"] = append([]string{}, res.Skipped...)
	}
	httpapi.WriteJSON(w, http.StatusCreated, out)
}

func formatTags(tags map[string]string) string {
	var parts []string
	for k, v := range tags {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// allParam reads ?all=true|false.
func allParam(w http.ResponseWriter, r *http.Request) (all, ok bool) {
	switch v := r.URL.Query().Get("all"); v {
	case "", "false", "0":
		return false, true
	case "true", "1":
		return true, true
	default:
		httpapi.WriteError(w, http.StatusBadRequest, "all must be true or false, got "+strconv.Quote(v))
		return false, false
	}
}

// getNotices lists the path's peer's notices, or the channel's.
func (ns *API) getNotices(w http.ResponseWriter, r *http.Request) {
	chID, ok := ns.noticeChannel(w, r)
	if !ok {
		return
	}
	all, ok := allParam(w, r)
	if !ok {
		return
	}
	if peer := r.PathValue("peer_id"); peer != "" {
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"channel_id": chID, "peer_id": peer, "notices": ns.store.ListPeer(chID, peer, all)})
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"channel_id": chID, "notices": ns.store.List(chID, all)})
}

// deleteNotice withdraws a notice from the path's peer, or from all.
func (ns *API) deleteNotice(w http.ResponseWriter, r *http.Request) {
	chID, ok := ns.noticeChannel(w, r)
	if !ok {
		return
	}
	id, peer := r.PathValue("notice_id"), r.PathValue("peer_id")
	n, err := ns.store.Withdraw(chID, id, peer)
	switch {
	case errors.Is(err, ErrUnknownNotice) && peer != "":
		httpapi.WriteError(w, http.StatusNotFound, "peer "+peer+" of channel "+strconv.Quote(chID)+" has no notice "+strconv.Quote(id))
	case errors.Is(err, ErrUnknownNotice):
		httpapi.WriteError(w, http.StatusNotFound, "channel "+strconv.Quote(chID)+" has no notice "+strconv.Quote(id))
	case err != nil:
		httpapi.WriteError(w, http.StatusServiceUnavailable, "the withdrawal was not stored: "+err.Error())
	default:
		httpapi.WriteJSON(w, http.StatusOK, map[string]any{"withdrawn": n})
	}
}

// AgentSpec is the notice an agent's unsolicited output becomes: info,
// the default display time and lifetime, text cut to MaxTextChars.
func AgentSpec(text string, now time.Time) Spec {
	if utf8.RuneCountInString(text) > MaxTextChars {
		text = string([]rune(text)[:MaxTextChars-1]) + "…"
	}
	return Spec{Text: text, Priority: link.PriorityInfo, DisplaySeconds: defaultDisplaySeconds,
		ExpiresAt: now.Add(defaultNoticeTTL), Source: "agent"}
}
