package wschannel

import "termlink/server/metrics"

// Metrics are the adapters' series. The server registers them once, in
// its /metrics order among the runtime's (package runtime, NewMetrics),
// and hands the same Metrics to every channel's adapter; the labelled
// ones are by channel id.
type Metrics struct {
	Connections *metrics.GaugeVec   // termlink_connections: live connections that completed connect
	Connects    *metrics.CounterVec // termlink_connects_total: connect frames answered with connected
	Rejected    *metrics.CounterVec // termlink_frames_rejected_total: frames answered with an error frame
	Dropped     *metrics.CounterVec // termlink_slow_clients_dropped_total: writes that made no progress
	WebSockets  *metrics.GaugeVec   // termlink_websockets_open: open WebSockets, connected or not (the connection cap counts these)
	OverCap     *metrics.CounterVec // termlink_websockets_refused_total: upgrades refused with 503 at the connection cap
	Paused      *metrics.CounterVec // termlink_reader_paused_total: times a reader stopped reading because its send queue was full
	Busy        *metrics.CounterVec // termlink_inbound_busy_total: messages answered busy because a waiting bound was full (a held one counts once it runs out)
	Held        *metrics.CounterVec // termlink_reader_held_total: messages a full waiting bound refused that the reader held, not reading the device, until a place freed
	Deferred    *metrics.CounterVec // termlink_replies_deferred_total: replies a full reply queue could not take (the device is told to resend)
	Deltas      *metrics.CounterVec // termlink_deltas_sent_total: delta frames written (streamed reply text)
}
