package server

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"termlink/link"
	"termlink/server/agent"
	"termlink/server/config"
)

// askTimer is an agent that asks one question per message and notes
// when it asked and when the answer reached it.
type askTimer struct {
	asked, answered chan time.Time
}

func (a *askTimer) Run(ctx context.Context, req agent.Request, _ agent.Progress) agent.Result {
	a.asked <- time.Now()
	id, err := req.Ask(ctx, agent.Question{Text: "Allow?", Options: []link.Option{{ID: "allow", Label: "Allow"}, {ID: "deny", Label: "Deny"}}, Timeout: 5 * time.Second})
	a.answered <- time.Now()
	if err != nil {
		return agent.Result{Text: err.Error()}
	}
	return agent.Result{Text: id}
}
func (*askTimer) Close() error { return nil }

// TestMeasureQuestion measures (TERMLINK_MEASURE=1), on one server with
// a raw device on loopback, the time from an agent's Ask to the question
// frame read by the device, and from the answer frame written to Ask
// returning in the agent: p50 and p99 of 500.
func TestMeasureQuestion(t *testing.T) {
	if os.Getenv("TERMLINK_MEASURE") == "" {
		t.Skip("a measurement: set TERMLINK_MEASURE=1")
	}
	run := &askTimer{asked: make(chan time.Time, 1), answered: make(chan time.Time, 1)}
	ts := startServer(t, func(c *config.Config) { // a message and an answer each round
		ch := c.Channels["terminal-dev"]
		ch.Config.RatePerPeer, ch.Config.RateBurst = 10000, 10000
		c.Channels["terminal-dev"] = ch
	}, run)
	d := newChoiceDevice(t, ts, "kiosk")
	const n = 500
	var toGlass, toAgent []time.Duration
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		d.send(&link.Message{MessageID: id, Text: "go"})
		var q *link.Question
		d.until(func(f link.Frame) bool { q, _ = f.(*link.Question); return q != nil })
		seen := time.Now()
		toGlass = append(toGlass, seen.Sub(<-run.asked))
		key := time.Now()
		d.send(&link.Answer{MessageID: "a" + id, QuestionID: q.QuestionID, OptionID: "allow"})
		toAgent = append(toAgent, (<-run.answered).Sub(key))
		d.reply(id)
	}
	pct := func(ds []time.Duration, p int) time.Duration {
		slices.Sort(ds)
		return ds[(len(ds)-1)*p/100]
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("agent's Ask -> question read by the device: p50 %s p99 %s; answer written -> Ask returns: p50 %s p99 %s (n=%d, load %s)",
		pct(toGlass, 50), pct(toGlass, 99), pct(toAgent, 50), pct(toAgent, 99), n, string(load[:14]))
}
