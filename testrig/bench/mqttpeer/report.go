package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"termlink/testrig/load"
)

// report is what a load run measured, with the JSON names of termrig
// load's report for the figures both have (testrig/bench/lib.sh's field
// reads either). MQTT has no error frame: error_frames is always 0.
type report struct {
	Broker      string  `json:"url"`
	Rate        float64 `json:"rate"`
	DurationMs  float64 `json:"duration_ms"`
	ElapsedMs   float64 `json:"elapsed_ms"`
	Interrupted bool    `json:"interrupted"`
	Hold        bool    `json:"hold,omitempty"`
	Mode        string  `json:"mode"`

	DevicesRequested int            `json:"devices_requested"`
	DevicesConnected int            `json:"devices_connected"`
	DevicesFailed    int            `json:"devices_failed"`
	ConnectErrors    map[string]int `json:"connect_errors,omitempty"`
	Disconnected     int            `json:"disconnected"`

	Sent             int64 `json:"sent"`
	SendErrors       int64 `json:"send_errors"`
	Acked            int64 `json:"acked"`
	Replied          int64 `json:"replied"`
	Lost             int64 `json:"lost"`
	DuplicateReplies int64 `json:"duplicate_replies"`
	UnknownIDs       int64 `json:"unknown_ids"`
	// StaleReplies are replies to another run's messages (a persistent
	// session's leftovers).
	StaleReplies     int64 `json:"stale_replies"`
	ErrorFrames      int64 `json:"error_frames"`
	BadFrames        int64 `json:"bad_frames"`
	UnexpectedFrames int64 `json:"unexpected_frames"`
	PingsSent        int64 `json:"pings_sent"`
	Pongs            int64 `json:"pongs"`

	ThroughputPerSec float64      `json:"throughput_per_sec"`
	RoundTrip        load.Latency `json:"round_trip_ms"`
	Ack              load.Latency `json:"ack_ms"`

	ServerCPUMs         float64 `json:"server_cpu_ms,omitempty"`
	ServerCPUReplies    int64   `json:"server_cpu_replies,omitempty"`
	ServerCPUPerReplyUs float64 `json:"server_cpu_per_reply_us,omitempty"`
	ServerCPUError      string  `json:"server_cpu_error,omitempty"`
	// ServerCPUByPID splits ServerCPUMs by process (--server-pid lists
	// several: the broker's share and the responder's).
	ServerCPUByPID map[string]float64 `json:"server_cpu_ms_by_pid,omitempty"`
}

func (l *loader) report(sendStart, sendEnd time.Time, interrupted bool) *report {
	t := l.track
	l.mu.Lock()
	defer l.mu.Unlock()
	rep := &report{
		Broker: l.o.broker, Rate: l.o.rate, Interrupted: interrupted, Hold: l.o.hold, Mode: "mqtt",
		DevicesRequested: l.o.devices,
		DevicesConnected: l.o.devices - l.failed,
		DevicesFailed:    l.failed,
		Disconnected:     l.disconnected,
		Sent:             t.sent.Load(),
		SendErrors:       l.sendErrors.Load(),
		Acked:            t.acked.Load(),
		Replied:          t.replied.Load(),
		Lost:             t.outstanding(),
		DuplicateReplies: t.dupReplies.Load(),
		UnknownIDs:       t.unknown.Load(),
		StaleReplies:     l.stale.Load(),
		BadFrames:        l.badPackets.Load(),
		UnexpectedFrames: l.unexpected.Load(),
		PingsSent:        l.pingsSent.Load(),
		Pongs:            l.pongs.Load(),
		RoundTrip:        latency(t.replyNs),
		Ack:              latency(t.ackNs),
	}
	if len(l.connectErrs) > 0 {
		rep.ConnectErrors = l.connectErrs
	}
	if !sendStart.IsZero() {
		rep.DurationMs = ms(sendEnd.Sub(sendStart))
		// As termrig load: replies over the sending window, or until the
		// last reply when that came later.
		window := sendEnd.Sub(sendStart)
		if last := time.Unix(0, t.lastReply.Load()).Sub(sendStart); t.lastReply.Load() > 0 && last > window {
			window = last
		}
		if rep.Replied > 0 && window > 0 {
			rep.ThroughputPerSec = float64(rep.Replied) / window.Seconds()
		}
	}
	return rep
}

// text writes rep for a person.
func (rep *report) text(w io.Writer) {
	fmt.Fprintf(w, "devices\t%d connected of %d (%d failed, %d disconnected)\n", rep.DevicesConnected, rep.DevicesRequested, rep.DevicesFailed, rep.Disconnected)
	for e, n := range rep.ConnectErrors {
		fmt.Fprintf(w, "  connect error x%d\t%s\n", n, e)
	}
	fmt.Fprintf(w, "messages\tsent %d acked %d replied %d lost %d (send errors %d, unknown %d, stale %d, bad %d)\n",
		rep.Sent, rep.Acked, rep.Replied, rep.Lost, rep.SendErrors, rep.UnknownIDs, rep.StaleReplies, rep.BadFrames)
	fmt.Fprintf(w, "throughput\t%.1f replies/s\n", rep.ThroughputPerSec)
	fmt.Fprintf(w, "round trip\tp50 %.2f ms p90 %.2f ms p99 %.2f ms max %.2f ms (n %d)\n", rep.RoundTrip.P50, rep.RoundTrip.P90, rep.RoundTrip.P99, rep.RoundTrip.Max, rep.RoundTrip.N)
	if rep.ServerCPUError != "" {
		fmt.Fprintf(w, "server cpu\t%s\n", rep.ServerCPUError)
	} else if rep.ServerCPUReplies > 0 {
		fmt.Fprintf(w, "server cpu\t%.0f ms for %d replies: %.1f µs/reply\n", rep.ServerCPUMs, rep.ServerCPUReplies, rep.ServerCPUPerReplyUs)
	}
}

// cpuMeter sums the CPU time of the server's processes (the broker and
// the responder) over the send and drain phase.
type cpuMeter struct {
	pids      []int
	at, used  []time.Duration // by pid
	replies   int64
	err       error
	measuring bool
}

// cpuOf is the CPU time each of pids has used.
func cpuOf(pids []int) ([]time.Duration, error) {
	out := make([]time.Duration, len(pids))
	var errs []string
	for i, p := range pids {
		d, err := load.ProcessCPU(p)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out[i] = d
	}
	if errs != nil {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

func (c *cpuMeter) start(pids []int) {
	if len(pids) == 0 {
		return
	}
	c.pids, c.measuring = pids, true
	c.at, c.err = cpuOf(pids)
}

func (c *cpuMeter) stop(replies int64) {
	if !c.measuring || c.err != nil {
		return
	}
	end, err := cpuOf(c.pids)
	if err != nil {
		c.err = err
		return
	}
	c.used = make([]time.Duration, len(end))
	for i := range end {
		c.used[i] = end[i] - c.at[i]
	}
	c.replies = replies
}

func (c *cpuMeter) fill(rep *report) {
	switch {
	case !c.measuring:
	case c.err != nil:
		rep.ServerCPUError = c.err.Error()
	default:
		var sum time.Duration
		rep.ServerCPUByPID = map[string]float64{}
		for i, d := range c.used {
			sum += d
			rep.ServerCPUByPID[strconv.Itoa(c.pids[i])] = ms(d)
		}
		rep.ServerCPUMs = ms(sum)
		rep.ServerCPUReplies = c.replies
		if c.replies > 0 {
			rep.ServerCPUPerReplyUs = float64(sum) / float64(time.Microsecond) / float64(c.replies)
		}
	}
}
