package runtime

import (
	"termlink/server/metrics"
	"termlink/server/wschannel"
)

// Metrics are the series /metrics serves.
type Metrics struct {
	Reg          metrics.Registry
	WS           wschannel.Metrics // the channel adapters' series, shared by every channel's
	Inbound      *metrics.CounterVec
	Duplicates   *metrics.CounterVec
	Delivered    *metrics.CounterVec
	Unclaimed    *metrics.CounterVec
	Runs         *metrics.CounterVec
	RunSeconds   *metrics.HistogramVec
	ReplySeconds *metrics.HistogramVec
	Running      *metrics.GaugeVec

	LogFailures *metrics.CounterVec
}

// NewMetrics registers the series; their order is /metrics' order
// (the adapters' series among the runtime's).
func NewMetrics() *Metrics {
	m := &Metrics{}
	r := &m.Reg
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	m.WS.Connections = r.NewGaugeVec("termlink_connections", "Live terminal WebSocket connections that completed connect.", "channel")
	m.WS.Connects = r.NewCounterVec("termlink_connects_total", "connect frames answered with connected.", "channel")
	m.Inbound = r.NewCounterVec("termlink_inbound_total", "Messages accepted and published to the bus.", "channel")
	m.Duplicates = r.NewCounterVec("termlink_inbound_duplicates_total", "Messages answered from the dedupe table instead of run again.", "channel")
	m.WS.Rejected = r.NewCounterVec("termlink_frames_rejected_total", "Frames answered with an error frame.", "channel")
	m.Delivered = r.NewCounterVec("termlink_outbound_delivered_total", "Final replies handed to a live connection.", "channel")
	m.Unclaimed = r.NewCounterVec("termlink_outbound_unclaimed_total", "Final replies with no live connection to take them.", "channel")
	m.WS.Dropped = r.NewCounterVec("termlink_slow_clients_dropped_total", "Connections dropped because a write made no progress within the write timeout.", "channel")
	m.Runs = r.NewCounterVec("termlink_runs_total", "Agent runs finished, by finish reason.", "finish_reason")
	m.RunSeconds = r.NewHistogramVec("termlink_run_seconds", "Agent run time.", "channel", latency)
	m.ReplySeconds = r.NewHistogramVec("termlink_reply_seconds", "Time from accepting a message to dispatching its reply.", "channel", latency)
	m.Running = r.NewGaugeVec("termlink_runs_running", "Agent runs in progress.", "")
	m.WS.Busy = r.NewCounterVec("termlink_inbound_busy_total", "Messages refused as busy: their session or the server had the most messages waiting (a message held for room counts only if its hold runs out).", "channel")
	m.WS.Held = r.NewCounterVec("termlink_reader_held_total", "Messages a full waiting bound refused that their connection held, not reading the device, until a place freed (backpressure instead of a busy answer).", "channel")
	m.LogFailures = r.NewCounterVec("termlink_session_log_failures_total", "Session log writes that failed (disk full, I/O error).", "")
	m.WS.WebSockets = r.NewGaugeVec("termlink_websockets_open", "Open WebSocket connections, before and after connect.", "")
	m.WS.OverCap = r.NewCounterVec("termlink_websockets_refused_total", "WebSocket upgrades refused with HTTP 503 at the connection cap.", "")
	m.WS.Paused = r.NewCounterVec("termlink_reader_paused_total", "Times a connection's reader stopped reading because its send queue was full (backpressure).", "channel")
	m.WS.Deferred = r.NewCounterVec("termlink_replies_deferred_total", "Replies a connection's full reply queue could not take; the device was told to resend the message.", "channel")
	m.WS.Deltas = r.NewCounterVec("termlink_deltas_sent_total", "Delta frames (streamed reply text) written to devices that listed stream.", "channel")
	return m
}
