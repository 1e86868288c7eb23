package runtime

import (
	"context"

	"termlink/server/bus"
	"termlink/server/events"
	"termlink/server/record"
)

// Host is what a store of record reaches of the runtime: the
// router's queue and admission (record.Queue), and for the cluster the
// connections here and the channels' records (cluster.Host and
// cluster.DeviceCloser, asserted in the root's backend.go). The root's
// backend opens the store of record with it.
type Host struct{ rt *Runtime }

// Host is the runtime as a store of record's host.
func (rt *Runtime) Host() Host { return Host{rt} }

var _ record.Queue = Host{}

func (h Host) ReserveFirst(session string, perSession int) (bool, error) {
	return h.rt.Admission.ReserveFirst(session, perSession)
}
func (h Host) ReserveWait(ctx context.Context, session string, perSession int) error {
	return h.rt.Admission.ReserveWait(ctx, session, perSession)
}
func (h Host) Release(session string) { h.rt.Admission.Release(session, 1) }
func (h Host) MaxWaiting() int        { return h.rt.Admission.MaxTotal() }
func (h Host) StartsAtOnce(session string) bool {
	return h.rt.Router.StartsAtOnce(session)
}

// Put hands an accepted message to the router, which queues it without
// blocking (no goroutine handoff on the way).
func (h Host) Put(_ context.Context, in bus.Inbound) error {
	h.rt.Router.Put(in)
	return nil
}

// Dispatch hands a reply or progress to its channel's adapter, whose Send
// never blocks, on the caller's goroutine (the run's, or in a cluster the
// edge's delivery subscription).
func (h Host) Dispatch(_ context.Context, out bus.Outbound) error {
	h.rt.dispatchOne(out)
	return nil
}
func (h Host) Cancel(sessionKey, messageID string) bool {
	return h.rt.Router.Cancel(sessionKey, messageID)
}
func (h Host) NewRunID() string { return h.rt.newRunID() }
func (h Host) ReplaceElsewhere(channel, peer, edge string) {
	if a := h.rt.Channels.Adapter(channel); a != nil {
		a.ReplaceElsewhere(peer, edge)
	}
}

// CloseDevices implements cluster.DeviceCloser: an edge cut off from
// NATS closes every device connection (cluster.EdgeWatch).
func (h Host) CloseDevices(code int, reason string) {
	for _, ch := range h.rt.Channels {
		if ch.Adapter != nil {
			ch.Adapter.CloseDevices(code, reason)
		}
	}
}

func (h Host) Unclaimed(out bus.Outbound, detail string) {
	ch := h.rt.Channels[out.ChannelID]
	if ch == nil {
		return
	}
	h.rt.Metrics.Unclaimed.Inc(ch.ID)
	ch.Events.Add(events.Event{Event: events.OutboundUnclaimed, PeerID: out.PeerID, SessionID: out.SessionKey,
		MessageID: out.MessageID, RunID: out.RunID, Preview: out.Text, Detail: detail})
}
