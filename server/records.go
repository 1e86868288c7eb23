package server

import (
	"context"

	"termlink/server/bus"
	"termlink/server/events"
)

// runtimeHost is what a store of record reaches of the runtime: the
// router's queue and admission (record.Queue), and for the cluster the
// connections here and the channels' records (cluster.Host and
// cluster.DeviceCloser, asserted in backend.go). The backend
// (backend.go) opens the store of record with it.
type runtimeHost struct{ rt *Runtime }

func (h runtimeHost) ReserveFirst(session string, perSession int) (bool, error) {
	return h.rt.admission.ReserveFirst(session, perSession)
}
func (h runtimeHost) ReserveWait(ctx context.Context, session string, perSession int) error {
	return h.rt.admission.ReserveWait(ctx, session, perSession)
}
func (h runtimeHost) Release(session string) { h.rt.admission.Release(session, 1) }
func (h runtimeHost) MaxWaiting() int        { return h.rt.admission.MaxTotal() }
func (h runtimeHost) StartsAtOnce(session string) bool {
	return h.rt.router.StartsAtOnce(session)
}

// Put hands an accepted message to the router, which queues it without
// blocking (no goroutine handoff on the way).
func (h runtimeHost) Put(_ context.Context, in bus.Inbound) error {
	h.rt.router.Put(in)
	return nil
}

// Dispatch hands a reply or progress to its channel's adapter, whose Send
// never blocks, on the caller's goroutine (the run's, or in a cluster the
// edge's delivery subscription).
func (h runtimeHost) Dispatch(_ context.Context, out bus.Outbound) error {
	h.rt.dispatchOne(out)
	return nil
}
func (h runtimeHost) Cancel(sessionKey, messageID string) bool {
	return h.rt.router.Cancel(sessionKey, messageID)
}
func (h runtimeHost) NewRunID() string { return h.rt.newRunID() }
func (h runtimeHost) ReplaceElsewhere(channel, peer, edge string) {
	if a := h.rt.channels.adapter(channel); a != nil {
		a.ReplaceElsewhere(peer, edge)
	}
}

// CloseDevices implements cluster.DeviceCloser: an edge cut off from
// NATS closes every device connection (cluster.EdgeWatch).
func (h runtimeHost) CloseDevices(code int, reason string) {
	for _, ch := range h.rt.channels {
		if ch.adapter != nil {
			ch.adapter.CloseDevices(code, reason)
		}
	}
}

func (h runtimeHost) Unclaimed(out bus.Outbound, detail string) {
	ch := h.rt.channels[out.ChannelID]
	if ch == nil {
		return
	}
	h.rt.metrics.unclaimed.Inc(ch.id)
	ch.events.Add(events.Event{Event: events.OutboundUnclaimed, PeerID: out.PeerID, SessionID: out.SessionKey,
		MessageID: out.MessageID, RunID: out.RunID, Preview: out.Text, Detail: detail})
}
