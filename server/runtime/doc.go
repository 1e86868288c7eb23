// Package runtime is termserver's message path: it accepts a device's
// message through the store of record (AcceptInbound: the session's
// holdback, the store's accept, the inbound events and metrics), is the
// router's Host (a run's start, progress, streamed text and finish,
// recorded in the store and then sent), and is the store's Host (Host:
// the router's queue and admission, the dispatch of a reply or progress
// to its channel's adapter). It keeps the configured channels
// (Channels: their config, event log, adapter and learnt bindings) and
// the series /metrics serves (Metrics).
//
// The root package builds a Runtime, opens the store of record with its
// Host, sets the router, channels and store on it, and wires every
// capability to it; the Runtime knows neither the backend nor the
// capabilities.
package runtime
