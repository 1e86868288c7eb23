package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/session"
)

// Claim states in the dedupe bucket.
const (
	StatePending  = "pending" // accepted by an edge, not started
	StateRunning  = "running" // a worker runs it (Attempt says which run)
	StateDone     = "done"    // answered: Reply is the cached reply
	StateCancel   = "cancel"  // the device cancelled it before it started
	maxRunAttempt = 2         // a run cut short is run again once
)

// Claim is a message's entry in the history stream (TERMLINK_HIST,
// subject termlink.hist.<session digest>.<message key>): its turn
// record, its dedupe entry and its cached reply in one. A worker writes
// it once per message on the hot path, done with the reply and the
// turn's records (create-only: expected last subject sequence 0).
// After a partition moved, the new owner writes it running before it
// runs a message the old owner may have started; each later change is a
// compare-and-set on the sequence read, so no two nodes both answer a
// message. An edge reads it to answer a resend (done: the cached reply;
// else pending), and creates it in state cancel for a message cancelled
// before it started.
type Claim struct {
	State     string `json:"state"`
	Session   string `json:"session"`
	MessageID string `json:"message_id"`
	RunID     string `json:"run_id"`
	Edge      string `json:"edge,omitempty"`
	Worker    string `json:"worker,omitempty"`
	Attempt   int    `json:"attempt,omitempty"`
	Reply     *Reply `json:"reply,omitempty"`
	// Records is the turn (the user message, a run_interrupted record,
	// the reply) once done: the session history.
	Records []session.Record `json:"records,omitempty"`
}

// Reply is a cached final reply.
type Reply struct {
	Text         string   `json:"text"`
	FinishReason string   `json:"finish_reason"`
	RunID        string   `json:"run_id"`
	Media        []string `json:"media,omitempty"`
}

// ErrConflict is returned by a compare-and-set that lost: another node
// changed the claim since it was read.
var ErrConflict = errors.New("cluster: the claim changed meanwhile")

// claimSubject is the subject of a message's claim in the history
// stream: under its session's, so a session's history is one filter.
func claimSubject(sessionKey, messageID string) string {
	return histPrefix + SessionDigest(sessionKey) + "." + MessageKey(sessionKey, messageID)
}

// GetClaim reads a message's claim from the history stream's leader;
// found is false when there is none. (A direct get may be answered by
// any replica, and a follower may not have applied the last write yet:
// a compare-and-set decided on that would fail, or an edge would miss a
// reply.)
func (n *Node) GetClaim(ctx context.Context, session, messageID string) (c Claim, rev uint64, found bool, err error) {
	return n.readClaim(ctx, n.leaderGet, session, messageID)
}

// PeekClaim reads a message's claim as GetClaim does, but from any
// replica of the history stream (JetStream's direct get: no API request
// on the leader, the message as stored rather than JSON with base64): it
// may miss a write a replica has not applied yet. The edge's lookup of a
// message it is about to publish takes it: a claim missed is a resend
// published again, which the stream's duplicate window keeps out, or,
// past the window, a worker reads the claim of a message it answered
// lately before it starts it (Claimer.Start), from the leader.
func (n *Node) PeekClaim(ctx context.Context, session, messageID string) (c Claim, rev uint64, found bool, err error) {
	return n.readClaim(ctx, n.directGet, session, messageID)
}

// readClaim reads a message's claim by get (leaderGet or directGet).
func (n *Node) readClaim(ctx context.Context, get func(ctx context.Context, stream, subject string) ([]byte, uint64, bool, error),
	session, messageID string) (c Claim, rev uint64, found bool, err error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	data, rev, found, err := get(ctx, HistStream, claimSubject(session, messageID))
	if err != nil {
		return Claim{}, 0, false, fmt.Errorf("cluster: reading the claim of message %s: %w", messageID, err)
	}
	if !found {
		return Claim{}, 0, false, nil
	}
	if c, err = decodeClaim(data); err != nil {
		return Claim{}, 0, false, fmt.Errorf("cluster: message %s: %w", messageID, err)
	}
	return c, rev, true, nil
}

// directGet reads the last message of subject in stream from any of its
// replicas (DIRECT.GET; the stream allows direct gets). found is false
// for no message.
func (n *Node) directGet(ctx context.Context, stream, subject string) (data []byte, seq uint64, found bool, err error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": subject})
	msg, err := n.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, req)
	if err != nil {
		return nil, 0, false, err
	}
	if st := msg.Header.Get("Status"); st != "" {
		if st == "404" {
			return nil, 0, false, nil
		}
		return nil, 0, false, fmt.Errorf("reading %s: status %s %s", stream, st, msg.Header.Get("Description"))
	}
	seq, err = strconv.ParseUint(msg.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return nil, 0, false, fmt.Errorf("reading %s: answer without a sequence", stream)
	}
	return msg.Data, seq, true, nil
}

// leaderGet reads the last message of subject in stream from the
// stream's leader (the JetStream API's STREAM.MSG.GET, not a direct
// get). found is false for no message, or a KV delete or purge marker.
func (n *Node) leaderGet(ctx context.Context, stream, subject string) (data []byte, seq uint64, found bool, err error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": subject})
	msg, err := n.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, 0, false, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq  uint64 `json:"seq"`
			Data []byte `json:"data"`
			Hdrs []byte `json:"hdrs"`
		} `json:"message"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, 0, false, fmt.Errorf("reading %s: answer is not JSON: %w", stream, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == 10037 { // no message found
			return nil, 0, false, nil
		}
		return nil, 0, false, fmt.Errorf("reading %s: %s (code %d)", stream, resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return nil, 0, false, fmt.Errorf("reading %s: answer without a message", stream)
	}
	if h := resp.Message.Hdrs; bytes.Contains(h, []byte("KV-Operation: DEL")) || bytes.Contains(h, []byte("KV-Operation: PURGE")) {
		return nil, 0, false, nil
	}
	return resp.Message.Data, resp.Message.Seq, true, nil
}

// UpdateClaim replaces the claim read at revision rev (its sequence in
// the history stream); ErrConflict when it changed since. rev 0 creates
// it (it must not exist). One replicated write.
func (n *Node) UpdateClaim(ctx context.Context, c Claim, rev uint64) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	b, err := json.Marshal(c)
	if err != nil {
		return 0, fmt.Errorf("cluster: the claim of message %s: %w", c.MessageID, err)
	}
	pa, err := n.js.Publish(ctx, claimSubject(c.Session, c.MessageID), b, jetstream.WithExpectLastSequencePerSubject(rev))
	if isWrongLastSequence(err) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: updating the claim of message %s: %w", c.MessageID, err)
	}
	return pa.Sequence, nil
}

// isWrongLastSequence reports a compare-and-set refused by the stream:
// "wrong last sequence", with the sequence (10071) or without (10164,
// which nats.go does not map to ErrKeyExists).
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == 10164)
}
