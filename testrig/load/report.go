package load

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a Run measured. Durations are in milliseconds.
type Report struct {
	URL         string  `json:"url"`
	Rate        float64 `json:"rate"`        // messages/s asked for, over all devices
	DurationMs  float64 `json:"duration_ms"` // how long messages were actually sent
	ElapsedMs   float64 `json:"elapsed_ms"`  // the whole run: connect, send, drain, close
	Interrupted bool    `json:"interrupted"` // ctx ended the run early
	Hold        bool    `json:"hold,omitempty"`
	// Mode is "lean" (the built-in devices) or "client" (every device a
	// link.Client); Outbox is the clients' outbox, "memory" or "file".
	Mode   string `json:"mode"`
	Outbox string `json:"outbox,omitempty"`

	DevicesRequested int     `json:"devices_requested"`
	DevicesConnected int     `json:"devices_connected"`
	DevicesFailed    int     `json:"devices_failed"`
	ConnectErrors    []Count `json:"connect_errors,omitempty"` // first few distinct errors
	Connect          Latency `json:"connect_ms"`               // dial to connected frame
	// Disconnected counts connections that ended before the run closed
	// them (client mode: a link that left connected; the client then
	// reconnects by itself).
	Disconnected     int     `json:"disconnected"`
	DisconnectErrors []Count `json:"disconnect_errors,omitempty"`
	// Reconnects counts sessions a client got back after a disconnect
	// (client mode; a lean device does not reconnect).
	Reconnects int `json:"reconnects"`
	// Reconnect is, per reconnect, the time from the link leaving
	// connected to connected again; ReconnectWait the part of it the
	// client waited in backoff (client mode).
	Reconnect     Latency `json:"reconnect_ms"`
	ReconnectWait Latency `json:"reconnect_wait_ms"`
	// ReconnectFailures counts the failed attempts of devices getting
	// their link back, by refusal class (RefusalClass; client mode).
	ReconnectFailures map[string]int `json:"reconnect_failures,omitempty"`
	// ReconnectLogError is the first error writing Options.Reconnects.
	ReconnectLogError string `json:"reconnect_log_error,omitempty"`
	// Client sums the link.Client counters (client mode).
	Client *ClientStats `json:"client,omitempty"`
	// Servers lists the servers and the devices on each, when there are
	// several.
	Servers []ServerCount `json:"servers,omitempty"`
	// With Options.Move: Moves counts moves started (a device left its
	// server for the next), MovesFailed those whose device did not get
	// connected to the next server (first attempt), MoveErrors says why.
	// Resent counts the messages lean devices wrote again, with the same
	// message id, after a move (client mode: see Client.Resent).
	Move        float64 `json:"move_ms,omitempty"`
	Moves       int     `json:"moves"`
	MovesFailed int     `json:"moves_failed"`
	MoveErrors  []Count `json:"move_errors,omitempty"`
	Resent      int64   `json:"resent"`

	Sent       int64 `json:"sent"`
	SendErrors int64 `json:"send_errors"` // writes that failed (not counted in Sent)
	Acked      int64 `json:"acked"`       // distinct messages acked
	Rejected   int64 `json:"rejected"`    // acks with accepted:false
	Replied    int64 `json:"replied"`     // distinct messages answered
	// Lost counts messages sent but not answered by the end of the drain.
	Lost int64 `json:"lost"`
	// DuplicateAcks counts acks with duplicate:true; DuplicateReplies
	// counts replies received again for an already answered message_id.
	DuplicateAcks    int64 `json:"duplicate_acks"`
	DuplicateReplies int64 `json:"duplicate_replies"`
	// UnknownIDs counts acks and replies for message ids never sent.
	UnknownIDs    int64            `json:"unknown_ids"`
	FinishReasons map[string]int64 `json:"finish_reasons,omitempty"`

	ErrorFrames      int64   `json:"error_frames"`
	ErrorTexts       []Count `json:"error_texts,omitempty"` // error frames by text
	BadFrames        int64   `json:"bad_frames"`            // frames link.Decode refused
	BadFrameErrors   []Count `json:"bad_frame_errors,omitempty"`
	UnexpectedFrames int64   `json:"unexpected_frames"` // valid frames out of place

	PingsSent   int64 `json:"pings_sent"`
	Pongs       int64 `json:"pongs"`
	MissedPongs int64 `json:"missed_pongs"` // pings still unanswered at the next heartbeat
	ServerPings int64 `json:"server_pings"`

	// Streaming (Options.Stream): FirstDelta is message sent to its
	// first delta frame; StreamedRuns the replies that had deltas before
	// them, DeltaFrames all delta frames, DeltasPerRun their mean over
	// the streamed runs and MaxDeltasPerRun the most one run had.
	// DeltaGaps counts deltas whose seq did not follow the one before,
	// LateDeltas deltas after their message's reply, DeltaMismatches
	// replies whose deltas did not add up to the start of their text.
	Stream          bool    `json:"stream,omitempty"`
	FirstDelta      Latency `json:"first_delta_ms"`
	StreamedRuns    int64   `json:"streamed_runs,omitempty"`
	DeltaFrames     int64   `json:"delta_frames,omitempty"`
	DeltasPerRun    float64 `json:"deltas_per_run,omitempty"`
	MaxDeltasPerRun int32   `json:"max_deltas_per_run,omitempty"`
	DeltaGaps       int64   `json:"delta_gaps,omitempty"`
	LateDeltas      int64   `json:"late_deltas,omitempty"`
	DeltaMismatches int64   `json:"delta_mismatches,omitempty"`

	ThroughputPerSec float64 `json:"throughput_per_sec"` // replies per second
	RoundTrip        Latency `json:"round_trip_ms"`      // message sent to final reply
	Ack              Latency `json:"ack_ms"`             // message sent to ack

	// With Options.ServerPID: the server process's CPU time (user +
	// system) from the start of sending to the end of the drain, the
	// replies received in that window, and the CPU time per reply.
	ServerCPUMs         float64 `json:"server_cpu_ms,omitempty"`
	ServerCPUReplies    int64   `json:"server_cpu_replies,omitempty"`
	ServerCPUPerReplyUs float64 `json:"server_cpu_per_reply_us,omitempty"`
	ServerCPUError      string  `json:"server_cpu_error,omitempty"`
}

// ServerCount is one server of a run with several and its devices.
type ServerCount struct {
	URL       string `json:"url"`
	Devices   int    `json:"devices"`   // devices that started on it (i mod n)
	Connected int    `json:"connected"` // connected to it after the connect phase
	// ConnectedAtEnd counts the devices connected to it when the sending
	// and the drain ended (moves change it).
	ConnectedAtEnd int `json:"connected_at_end"`
}

// ClientStats sums link.ClientStats over the devices of a client-mode run.
type ClientStats struct {
	Dials      int64 `json:"dials"`       // dial attempts, first ones included
	Sessions   int64 `json:"sessions"`    // dials that reached connected
	FramesSent int64 `json:"frames_sent"` // message frames written, resends included
	Resent     int64 `json:"resent"`      // message frames written again after a reconnect
	// DroppedDuplicates counts replies the server sent again for an
	// already answered message, which the client dropped.
	DroppedDuplicates int64 `json:"dropped_duplicates"`
}

// report builds the Report once every goroutine of the run has ended.
func (r *runner) report(start, sendStart, sendEnd time.Time, interrupted bool) *Report {
	t := r.track
	rep := &Report{
		URL:               r.opt.URL,
		Rate:              r.opt.Rate,
		ElapsedMs:         ms(time.Since(start)),
		Interrupted:       interrupted,
		Hold:              r.opt.Hold,
		DevicesRequested:  r.opt.Devices,
		DevicesConnected:  len(r.connectLat),
		DevicesFailed:     r.failed,
		ConnectErrors:     r.connectErrs.counts(),
		Connect:           summarize(r.connectLat),
		Disconnected:      r.disconnected,
		DisconnectErrors:  r.disconnErrs.counts(),
		Reconnects:        r.reconnects,
		Reconnect:         summarize(r.reconnectLat),
		ReconnectWait:     summarize(r.reconnectWait),
		ReconnectFailures: r.refusals,
		Client:            r.clientStats,
		Mode:              "lean",
		Move:              ms(r.opt.Move),
		Moves:             r.moves,
		MovesFailed:       r.movesFailed,
		MoveErrors:        r.moveErrs.counts(),
		Resent:            t.resent,

		Sent:             t.sent,
		SendErrors:       t.sendErrors,
		Acked:            t.acked,
		Rejected:         t.rejected,
		Replied:          t.replied,
		Lost:             int64(t.open),
		DuplicateAcks:    t.dupAcks,
		DuplicateReplies: t.dupReplies,
		UnknownIDs:       t.unknown,
		ErrorFrames:      t.errFrames,
		ErrorTexts:       t.errText.counts(),
		BadFrames:        t.badFrames,
		BadFrameErrors:   t.badText.counts(),
		UnexpectedFrames: t.unexpected,

		PingsSent:   r.pingsSent.Load(),
		Pongs:       r.pongs.Load(),
		MissedPongs: r.missedPongs.Load(),
		ServerPings: r.serverPings.Load(),

		RoundTrip: summarize(t.rtt),
		Ack:       summarize(t.ackLat),

		Stream:          r.opt.Stream,
		FirstDelta:      summarize(t.firstDelta),
		StreamedRuns:    t.streamedRuns,
		DeltaFrames:     t.deltaFrames,
		MaxDeltasPerRun: t.maxDeltas,
		DeltaGaps:       t.deltaGaps,
		LateDeltas:      t.deltaLate,
		DeltaMismatches: t.deltaDiffer,
	}
	if t.streamedRuns > 0 {
		rep.DeltasPerRun = float64(t.deltaFrames-t.deltaLate) / float64(t.streamedRuns)
	}
	if r.opt.Client {
		rep.Mode, rep.Outbox = "client", r.opt.Outbox
	}
	if len(r.servers) > 1 {
		rep.Servers = slices.Clone(r.servers)
	}
	if len(t.finish) > 0 {
		rep.FinishReasons = maps.Clone(t.finish)
	}
	if !sendStart.IsZero() {
		rep.DurationMs = ms(sendEnd.Sub(sendStart))
		// Replies per second over the time they took to come back: the
		// sending window, or longer when the last replies came late.
		window := sendEnd.Sub(sendStart)
		if last := t.lastReply.Sub(sendStart); last > window {
			window = last
		}
		if t.replied > 0 && window > 0 {
			rep.ThroughputPerSec = float64(t.replied) / window.Seconds()
		}
	}
	return rep
}

// Err says why the run failed — a device that could not connect or a lost
// message — or returns nil.
func (r *Report) Err() error {
	var errs []string
	if r.DevicesFailed > 0 {
		errs = append(errs, fmt.Sprintf("%d of %d devices failed to connect", r.DevicesFailed, r.DevicesRequested))
	}
	if r.Lost > 0 {
		errs = append(errs, fmt.Sprintf("%d of %d messages lost", r.Lost, r.Sent))
	}
	if n := r.DeltaGaps + r.LateDeltas + r.DeltaMismatches; n > 0 {
		errs = append(errs, fmt.Sprintf("streamed text wrong: %d deltas out of sequence, %d after their reply, %d replies whose deltas did not add up to their text",
			r.DeltaGaps, r.LateDeltas, r.DeltaMismatches))
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

// WriteText writes r as a table for a person.
func (r *Report) WriteText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format+"\n", a...) }
	counts := func(cs []Count) {
		for _, c := range cs {
			p("\t  %d× %s", c.Count, c.Text)
		}
	}
	lat := func(l Latency, p90 bool) string {
		if l.N == 0 {
			return "-"
		}
		s := "p50 " + msText(l.P50)
		if p90 {
			s += "  p90 " + msText(l.P90)
		}
		s += "  p99 " + msText(l.P99) + "  max " + msText(l.Max)
		return s + fmt.Sprintf("  (n=%d)", l.N)
	}

	if len(r.Servers) > 1 {
		p("servers\t%d, devices spread round-robin", len(r.Servers))
	} else {
		p("server\t%s", r.URL)
	}
	var mode string
	switch {
	case r.Hold:
		mode = "hold idle connections until interrupted"
	case r.Rate == 0:
		mode = "idle (heartbeats only) for " + msText(r.DurationMs)
	default:
		mode = fmt.Sprintf("%g msg/s for %s", r.Rate, msText(r.DurationMs))
	}
	if r.Mode == "client" {
		mode += fmt.Sprintf(", every device a link.Client (%s outbox)", r.Outbox)
	}
	p("mode\t%s", mode)
	devices := fmt.Sprintf("requested %d  connected %d  failed %d  disconnected %d",
		r.DevicesRequested, r.DevicesConnected, r.DevicesFailed, r.Disconnected)
	if r.Mode == "client" {
		devices += fmt.Sprintf("  reconnects %d", r.Reconnects)
	}
	p("devices\t%s", devices)
	counts(r.ConnectErrors)
	counts(r.DisconnectErrors)
	for i, s := range r.Servers {
		p("server %d\t%d devices  connected %d  at the end %d  %s", i+1, s.Devices, s.Connected, s.ConnectedAtEnd, s.URL)
	}
	if r.Move > 0 {
		every := time.Duration(r.Move * float64(time.Millisecond)).String()
		moves := fmt.Sprintf("every %s: moves %d  failed %d", every, r.Moves, r.MovesFailed)
		if r.Mode != "client" {
			moves += fmt.Sprintf("  resent %d", r.Resent)
		}
		p("moves\t%s", moves)
		counts(r.MoveErrors)
	}
	p("connect\t%s", lat(r.Connect, false))
	if r.Reconnect.N > 0 {
		p("reconnect\t%s", lat(r.Reconnect, false))
		p("\twaiting in backoff %s", lat(r.ReconnectWait, false))
	}
	if len(r.ReconnectFailures) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.ReconnectFailures)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.ReconnectFailures[k]))
		}
		p("reconnect failures\t%s", strings.Join(parts, ", "))
	}
	if r.Rate > 0 || r.Sent > 0 {
		p("messages\tsent %d  acked %d  replied %d  lost %d", r.Sent, r.Acked, r.Replied, r.Lost)
		if r.SendErrors > 0 || r.Rejected > 0 || r.UnknownIDs > 0 {
			p("\tsend errors %d  rejected %d  unknown ids %d", r.SendErrors, r.Rejected, r.UnknownIDs)
		}
		p("duplicates\tacks %d  replies %d", r.DuplicateAcks, r.DuplicateReplies)
		if len(r.FinishReasons) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(r.FinishReasons)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, r.FinishReasons[k]))
			}
			p("finish\t%s", strings.Join(parts, "  "))
		}
		p("throughput\t%.1f replies/s", r.ThroughputPerSec)
		p("round trip\t%s", lat(r.RoundTrip, true))
		p("ack\t%s", lat(r.Ack, false))
		if r.Stream {
			p("first delta\t%s", lat(r.FirstDelta, true))
			p("deltas\t%d frames, %d streamed runs, %.1f per run, at most %d", r.DeltaFrames, r.StreamedRuns, r.DeltasPerRun, r.MaxDeltasPerRun)
			if r.DeltaGaps+r.LateDeltas+r.DeltaMismatches > 0 {
				p("\tout of sequence %d  after the reply %d  not adding up %d", r.DeltaGaps, r.LateDeltas, r.DeltaMismatches)
			}
		}
		if r.ServerCPUMs > 0 || r.ServerCPUError != "" {
			if r.ServerCPUError != "" {
				p("server cpu\t%s", r.ServerCPUError)
			} else {
				p("server cpu\t%s while sending and draining, %.1fµs per reply (%d replies)", msText(r.ServerCPUMs), r.ServerCPUPerReplyUs, r.ServerCPUReplies)
			}
		}
	}
	p("error frames\t%d", r.ErrorFrames)
	counts(r.ErrorTexts)
	if r.BadFrames > 0 || r.UnexpectedFrames > 0 {
		p("bad frames\t%d  unexpected frames %d", r.BadFrames, r.UnexpectedFrames)
		counts(r.BadFrameErrors)
	}
	if c := r.Client; c != nil {
		p("client\tdials %d  sessions %d  frames sent %d  resent %d  dropped duplicate replies %d",
			c.Dials, c.Sessions, c.FramesSent, c.Resent, c.DroppedDuplicates)
	} else {
		p("heartbeat\tpings %d  pongs %d  missed %d", r.PingsSent, r.Pongs, r.MissedPongs)
	}
	p("elapsed\t%s", msText(r.ElapsedMs))
	result := "ok"
	if err := r.Err(); err != nil {
		result = "FAIL: " + err.Error()
	}
	if r.Interrupted {
		result += " (interrupted)"
	}
	p("result\t%s", result)
	tw.Flush()
}

// msText formats milliseconds for the table: 0.42ms, 12.3ms, 1.52s.
func msText(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2fs", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.2fms", v)
	}
}
