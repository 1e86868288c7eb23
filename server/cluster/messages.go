package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
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
	return n.publishInbound(ctx, in, 0)
}

// publishInbound is PublishInbound with prev, the stream sequence of the
// message just before in in its session when the edge knows it (0: not
// known).
func (n *Node) publishInbound(ctx context.Context, in bus.Inbound, prev uint64) (*jetstream.PubAck, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	b, err := json.Marshal(inMsg{Inbound: in, Prev: prev})
	if err != nil {
		return nil, err
	}
	subj := sessionSubject(Partition(in.SessionKey, n.cfg.Partitions), in.SessionKey)
	pa, err := n.js.Publish(ctx, subj, b, jetstream.WithMsgID(MessageKey(in.SessionKey, in.MessageID)))
	if err != nil {
		return nil, fmt.Errorf("cluster: storing message %s in %s: %w", in.MessageID, InStream, err)
	}
	return pa, nil
}

// inMsg is a message in the inbound stream.
type inMsg struct {
	bus.Inbound
	// Prev is the stream sequence of the message just before this one in
	// its session, as the edge that stored it knew it: 0 not known,
	// noPrev none (the session has no earlier message in the stream).
	Prev uint64 `json:"prev_seq,omitempty"`
}

// noPrev is inMsg.Prev for a message with no earlier one of its session
// in the stream.
const noPrev = math.MaxUint64

// prevOf is inMsg.Prev for what the edge knows: seq (0: none) if known.
func prevOf(seq uint64, known bool) uint64 {
	switch {
	case !known:
		return 0
	case seq == 0:
		return noPrev
	}
	return seq
}

// lastInSession reads the stream sequence of a session's last message in
// the inbound stream from the stream's leader (0: none); ok false when
// it cannot be read.
func (n *Node) lastInSession(ctx context.Context, sessionKey string) (seq uint64, ok bool) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	m, err := n.in.GetLastMsgForSubject(ctx, sessionSubject(Partition(sessionKey, n.cfg.Partitions), sessionKey))
	switch {
	case err == nil:
		return m.Sequence, true
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, true
	}
	return 0, false
}

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
	edge, ok := n.mirror.Load().lookup(presenceKey(out.ChannelID, out.PeerID))
	if !ok {
		if edge, err = n.Presence(ctx, out.ChannelID, out.PeerID); err != nil || edge == "" {
			return "", err
		}
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
