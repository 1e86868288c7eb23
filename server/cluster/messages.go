package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"termlink/server/bus"
)

// PublishInbound puts an accepted message in the inbound stream, on its
// session's partition, and returns once JetStream has stored it on a
// quorum of its replicas. Its Nats-Msg-Id is the claim key, so a publish
// retried within the duplicate window is stored once.
// JetStream's ack says Duplicate when the stream had the message already
// (within the duplicate window).
func (n *Node) PublishInbound(ctx context.Context, in bus.Inbound) (*jetstream.PubAck, error) {
	pa, _, err := n.publishInbound(ctx, in, 0)
	return pa, err
}

// publishInbound is PublishInbound that names, in the message (inMsg.Prev),
// the one just before it in its session: the session subject's last
// message, checked by the stream as it stores the message (the expected
// last sequence per subject), so no reader has to look for it. last is
// the caller's guess (0: none); a wrong guess is refused with the right
// one, and the publish is made again with it. last out: the session's
// last message now (0: not known, after a duplicate).
func (n *Node) publishInbound(ctx context.Context, in bus.Inbound, last uint64) (*jetstream.PubAck, uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	subj := sessionSubject(Partition(in.SessionKey, n.cfg.Partitions), in.SessionKey)
	for attempt := 1; ; attempt++ {
		prev := last
		if prev == 0 {
			prev = noPrev
		}
		b, err := json.Marshal(inMsg{Inbound: in, Prev: prev})
		if err != nil {
			return nil, 0, err
		}
		pa, err := n.js.Publish(ctx, subj, b, jetstream.WithMsgID(MessageKey(in.SessionKey, in.MessageID)),
			jetstream.WithExpectLastSequencePerSubject(last))
		if err == nil {
			if pa.Duplicate {
				return pa, 0, nil // stored before: the session's last may be a later one
			}
			return pa, pa.Sequence, nil
		}
		if attempt < maxPublishGuesses {
			if actual, ok := wrongLastSequence(err); ok {
				last = actual // another edge stored one since (or this one never knew)
				continue
			}
			if inProcess(err) {
				// One of the session's messages is being stored still (its
				// ack came before the stream cleared it): in a moment.
				pause(ctx, time.Duration(attempt)*5*time.Millisecond)
				continue
			}
		}
		return nil, 0, fmt.Errorf("cluster: storing message %s in %s: %w", in.MessageID, InStream, err)
	}
}

// maxPublishGuesses bounds the publishes of one message whose named last
// message of its session was not the stream's (each refusal says the
// right one: more than one is a race with other edges storing messages of
// the same session).
const maxPublishGuesses = 4

// inProcess reports the stream's refusal of a publish whose subject has
// another message being stored (no expected check is made then).
func inProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10164 // JSStreamWrongLastSequenceConstantErr
}

// wrongLastSequence reads the stream's refusal of a publish whose expected
// last sequence was wrong: the right one.
func wrongLastSequence(err error) (uint64, bool) {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		return 0, false
	}
	i := strings.LastIndexByte(apiErr.Description, ':')
	if i < 0 {
		return 0, false
	}
	seq, perr := strconv.ParseUint(strings.TrimSpace(apiErr.Description[i+1:]), 10, 64)
	return seq, perr == nil
}

// inMsg is a message in the inbound stream.
type inMsg struct {
	bus.Inbound
	// Prev is the stream sequence of the message just before this one in
	// its session's subject, checked by the stream as it stored this one:
	// noPrev none; 0 not known (stored before Prev was written).
	Prev uint64 `json:"prev_seq,omitempty"`
}

// noPrev is inMsg.Prev for a message with no earlier one of its session
// in the stream (0: not known, a message stored before Prev was written).
const noPrev = math.MaxUint64

// sessionSubject is the inbound stream's subject for a session's
// messages: its partition's, then a digest of the session key, so that
// the worker can look up a session's messages in the stream (consumeFn).
// Messages stored before it (on the partition's subject alone) are
// consumed too.
func sessionSubject(p int, sessionKey string) string {
	return inPrefix + strconv.Itoa(p) + "." + SessionDigest(sessionKey)[:16]
}

// outMsg is a reply, progress update or delta (Kind) on its way to an edge.
type outMsg struct {
	Kind         bus.Kind `json:"kind"`
	ChannelID    string   `json:"channel"`
	PeerID       string   `json:"peer"`
	SessionKey   string   `json:"session"`
	MessageID    string   `json:"message_id"`
	RunID        string   `json:"run_id"`
	Text         string   `json:"text"`
	FinishReason string   `json:"finish_reason,omitempty"`
	Media        []string `json:"media,omitempty"`
	Started      int64    `json:"started,omitempty"` // unix nanoseconds the edge accepted it
}

// SendOut sends a reply, progress update or delta to the edge that holds its
// peer, by the presence mirror when this node keeps one (MirrorPresence;
// else, or when the mirror has no entry, by a read of the bucket) (core
// NATS: at most once; a lost reply is found by the edge's
// sweep of the dedupe bucket, or by the device's resend). It reports the
// edge, "" when no edge holds the peer.
func (n *Node) SendOut(ctx context.Context, out bus.Outbound) (edge string, err error) {
	if edge, err = n.edgeOf(ctx, out.ChannelID, out.PeerID); err != nil || edge == "" {
		return "", err
	}
	m := outMsg{Kind: out.Kind, ChannelID: out.ChannelID, PeerID: out.PeerID, SessionKey: out.SessionKey,
		MessageID: out.MessageID, RunID: out.RunID, Text: out.Text, FinishReason: out.FinishReason, Media: out.Media}
	if !out.Started.IsZero() {
		m.Started = out.Started.UnixNano()
	}
	b, _ := json.Marshal(m)
	if err := n.nc.Publish(outPrefix+edge, b); err != nil {
		return edge, fmt.Errorf("cluster: sending the reply of %s to edge %s: %w", out.MessageID, edge, err)
	}
	return edge, nil
}

// SubscribeOut calls fn with every reply, progress update and delta sent to this
// node, until Close.
func (n *Node) SubscribeOut(fn func(bus.Outbound)) error {
	s, err := n.nc.Subscribe(outPrefix+n.cfg.Name, func(msg *nats.Msg) {
		m, err := decodeOut(msg.Data)
		if err != nil {
			n.log.Warn("cluster: dropping a bad outbound message", "err", err)
			return
		}
		out := bus.Outbound{Kind: m.Kind, ChannelID: m.ChannelID, PeerID: m.PeerID, SessionKey: m.SessionKey,
			MessageID: m.MessageID, RunID: m.RunID, Text: m.Text, FinishReason: m.FinishReason, Media: m.Media}
		if m.Started != 0 {
			out.Started = time.Unix(0, m.Started)
		}
		fn(out)
	})
	if err != nil {
		return fmt.Errorf("cluster: subscribing to %s: %w", outPrefix+n.cfg.Name, err)
	}
	s.SetPendingLimits(1<<16, 256<<20)
	n.addSub(s)
	return nil
}

type cancelMsg struct {
	Session   string `json:"session"`
	MessageID string `json:"message_id"`
}

// Cancel tells every worker to interrupt the run of a message.
func (n *Node) Cancel(session, messageID string) error {
	b, _ := json.Marshal(cancelMsg{session, messageID})
	return n.nc.Publish(cancelSubject, b)
}

// SubscribeCancel calls fn for every cancel sent to the workers.
func (n *Node) SubscribeCancel(fn func(session, messageID string)) error {
	s, err := n.nc.Subscribe(cancelSubject, func(msg *nats.Msg) {
		var m cancelMsg
		if json.Unmarshal(msg.Data, &m) == nil {
			fn(m.Session, m.MessageID)
		}
	})
	if err != nil {
		return fmt.Errorf("cluster: subscribing to %s: %w", cancelSubject, err)
	}
	n.addSub(s)
	return nil
}

// presence is a peer's entry in the presence bucket.
type presence struct {
	Edge    string `json:"edge"`
	Channel string `json:"channel"`
	Peer    string `json:"peer"`
	Since   string `json:"since"`
}

func presenceKey(channel, peer string) string { return "p." + digest(channel+"\n"+peer) }

// SetPresence records that this edge holds the peer's connection now.
// The edge that held it before sees the change (WatchPresence) and
// closes its connection.
// It returns the entry's revision.
func (n *Node) SetPresence(ctx context.Context, channel, peer string) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	b, _ := json.Marshal(presence{Edge: n.cfg.Name, Channel: channel, Peer: peer, Since: time.Now().UTC().Format(time.RFC3339Nano)})
	rev, err := n.presence.Put(ctx, presenceKey(channel, peer), b)
	if err != nil {
		return 0, fmt.Errorf("cluster: recording the presence of %s: %w", peer, err)
	}
	return rev, nil
}

// ClearPresence removes the peer's presence if this edge still holds it.
func (n *Node) ClearPresence(ctx context.Context, channel, peer string) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	key := presenceKey(channel, peer)
	e, err := n.presence.Get(ctx, key)
	if err != nil {
		return
	}
	var p presence
	if json.Unmarshal(e.Value(), &p) != nil || p.Edge != n.cfg.Name {
		return
	}
	_ = n.presence.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
}

// Presence is the edge that holds the peer, "" for none.
func (n *Node) Presence(ctx context.Context, channel, peer string) (string, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	e, err := n.presence.Get(ctx, presenceKey(channel, peer))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("cluster: reading the presence of %s: %w", peer, err)
	}
	var p presence
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return "", nil
	}
	return p.Edge, nil
}

// WatchPresence calls fn(channel, peer, edge, revision) for every
// presence change made after the call, until Close; the watch is set up
// again after a failure.
func (n *Node) WatchPresence(fn func(channel, peer, edge string, rev uint64)) {
	n.Go(func(ctx context.Context) {
		for ctx.Err() == nil {
			w, err := watchKV(ctx, n.presence, nil, jetstream.UpdatesOnly())
			if err != nil {
				n.log.Warn("cluster: cannot watch presence; retrying", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			for e := range w.Updates() {
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				var p presence
				if json.Unmarshal(e.Value(), &p) == nil {
					fn(p.Channel, p.Peer, p.Edge, e.Revision())
				}
			}
			_ = w.Stop()
		}
	})
}
