package link_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"termlink/link"
	"termlink/testrig/chaos"
)

// Measurements, not assertions on timing: they run only with
// TERMLINK_MEASURE=1 (they take minutes and want a quiet machine) and
// print their figures with t.Log. Run with -v:
//
//	TERMLINK_MEASURE=1 go test -run 'TestMeasure' -v -timeout 30m ./link/
//
// TERMLINK_CHAOS_MESSAGES (default 10000) sizes the chaos run.

func measuring(t *testing.T) {
	if os.Getenv("TERMLINK_MEASURE") == "" {
		t.Skip("measurement: set TERMLINK_MEASURE=1 to run")
	}
}

// Time to detect a stalled link with the default client and server
// settings (server heartbeat 30s, client pong timeout 10s: the bound is
// 40s). Five devices connect 6s apart so the stall hits each at another
// point of its heartbeat cycle.
func TestMeasureStallDetectionDefaults(t *testing.T) {
	measuring(t)
	ts := newTestServer(t, newCountingRunner(0), nil) // default config: heartbeatSeconds 30
	p, err := chaos.New(chaos.Options{Target: ts.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const n = 5
	var devs []*device
	for i := range n {
		if i > 0 {
			time.Sleep(6 * time.Second)
		}
		d := newDevice(t, link.ClientConfig{URL: "ws://" + p.Addr() + "/api/channels/terminal-dev/ws",
			PeerID: fmt.Sprintf("stall-%d", i), Outbox: link.NewMemoryOutbox()})
		d.waitState(link.StateConnected, time.Time{}, 10*time.Second)
		devs = append(devs, d)
	}
	stalled := time.Now()
	p.SetMode(chaos.Stall)
	var took []time.Duration
	for _, d := range devs {
		at := d.waitState(link.StateWaiting, stalled, 60*time.Second)
		took = append(took, at.Sub(stalled).Round(time.Millisecond))
	}
	sorted := append([]time.Duration(nil), took...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("FIGURE stall detection, defaults (heartbeat %v from the server, pong timeout %v, bound %v): per device %v; min %v, median %v, max %v",
		30*time.Second, link.DefaultPongTimeout, 30*time.Second+link.DefaultPongTimeout, took, sorted[0], sorted[n/2], sorted[n-1])
	if sorted[n-1] > 30*time.Second+link.DefaultPongTimeout+time.Second {
		t.Errorf("a stall took %v to detect, over heartbeat + pong timeout", sorted[n-1])
	}
}

// Reconnect times of 1,000 devices (default backoff: 1s initial, ±50%
// jitter, 30s cap) after a server restart (Shutdown, New on the same
// workspace, Serve on the same port), timed from the moment the new
// server serves; and again with the server down for 10s in between.
func TestMeasureReconnect1000(t *testing.T) {
	measuring(t)
	for _, downtime := range []time.Duration{0, 10 * time.Second} {
		t.Run("down="+downtime.String(), func(t *testing.T) {
			ts := newTestServer(t, newCountingRunner(0), nil)
			res := reconnectAfterRestart(t, ts, 1000, link.ClientConfig{}, downtime)
			t.Logf("FIGURE reconnect after restart, 1000 devices, default backoff, server down %v: p50 %v, p99 %v, max %v after the server was back; spread first-to-last %v; %d dials while down",
				res.down.Round(time.Millisecond), res.p50, res.p99, res.max, res.spread, res.dialsWhileDown)
		})
	}
}

// A chaos run: devices send TERMLINK_CHAOS_MESSAGES messages (default
// 10,000) through the chaos proxy, which adds 5ms latency each way and
// cuts every connection every 3s; the server is also restarted twice. The
// agent takes 10ms per message, so runs are in progress at the cuts. Every message must be answered
// exactly once: lost and duplicated runs are counted (both must be 0).
func TestMeasureChaosRun(t *testing.T) {
	measuring(t)
	total := 10000
	if s := os.Getenv("TERMLINK_CHAOS_MESSAGES"); s != "" {
		var err error
		if total, err = strconv.Atoi(s); err != nil || total < 1 {
			t.Fatalf("TERMLINK_CHAOS_MESSAGES=%q", s)
		}
	}
	const devices = 20
	const perSecond = 25 // per device: 500/s over all devices
	perDevice := (total + devices - 1) / devices

	runner := newCountingRunner(10 * time.Millisecond) // replies still running at most cuts
	ts := newTestServer(t, runner, nil)
	p, err := chaos.New(chaos.Options{Target: ts.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// 5ms each way keeps frames in flight when a cut comes.
	sched, _ := chaos.ParseSchedule("0s:latency=5ms,3s:cut", 3*time.Second)
	ctx, stopChaos := context.WithCancel(context.Background())
	defer stopChaos()
	go p.RunSchedule(ctx, sched, nil)

	url := "ws://" + p.Addr() + "/api/channels/terminal-dev/ws"
	devs := make([]*device, devices)
	for i := range devs {
		devs[i] = newDevice(t, link.ClientConfig{URL: url, PeerID: fmt.Sprintf("chaos-%d", i), StateDir: t.TempDir(),
			RetryInitial: 100 * time.Millisecond, RetryMax: 2 * time.Second, StableAfter: 2 * time.Second})
	}
	start := time.Now()
	sent := make([]map[string]string, devices)
	var wg sync.WaitGroup
	for i, d := range devs {
		sent[i] = map[string]string{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / perSecond)
			defer tick.Stop()
			for j := range perDevice {
				if i*perDevice+j >= total {
					return
				}
				<-tick.C
				text := fmt.Sprintf("chaos %d/%d", i, j)
				id, err := d.Send(context.Background(), text)
				if err != nil {
					t.Errorf("Send: %v", err)
					return
				}
				sent[i][id] = text
			}
		}()
	}
	sendFor := time.Duration(perDevice) * time.Second / perSecond
	restarts := 0
	for _, at := range []time.Duration{sendFor / 3, 2 * sendFor / 3} {
		time.Sleep(time.Until(start.Add(at)))
		ts.restart()
		restarts++
	}
	wg.Wait()
	sentAt := time.Since(start)

	// Drain: wait up to 2 minutes for every reply, through the cuts.
	deadline := time.Now().Add(2 * time.Minute)
	lost, messages := 0, 0
	for {
		lost, messages = 0, 0
		for i, d := range devs {
			d.mu.Lock()
			for id := range sent[i] {
				messages++
				if len(d.replies[id]) == 0 {
					lost++
				}
			}
			d.mu.Unlock()
		}
		if lost == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	stopChaos()
	dupReplies, wrong := 0, 0
	var dials, sessions, resent, dropped int64
	for i, d := range devs {
		d.mu.Lock()
		for id, text := range sent[i] {
			rs := d.replies[id]
			if len(rs) > 1 {
				dupReplies += len(rs) - 1
			}
			if len(rs) > 0 && rs[0].Text != "You said: "+text {
				wrong++
			}
		}
		d.mu.Unlock()
		st := d.Stats()
		dials, sessions, resent, dropped = dials+st.Dials, sessions+st.Sessions, resent+st.Resent, dropped+st.DuplicateReplies
	}
	dupRuns, runs := runner.duplicatedRuns()
	ps := p.Stats()
	t.Logf("FIGURE chaos run: %d messages from %d devices over %v (sending %v), connections cut every 3s (%d cut), %d server restarts: "+
		"lost %d, runs duplicated %d (%d runs), replies delivered twice %d, wrong replies %d; %d dials, %d sessions, %d resends, %d duplicate replies dropped by the client",
		messages, devices, took.Round(time.Millisecond), sentAt.Round(time.Millisecond), ps.Cut, restarts,
		lost, dupRuns, runs, dupReplies, wrong, dials, sessions, resent, dropped)
	if lost != 0 || dupRuns != 0 || dupReplies != 0 || wrong != 0 || messages != total {
		t.Errorf("chaos run: %d messages (want %d), lost %d, runs duplicated %d, replies delivered twice %d, wrong %d",
			messages, total, lost, dupRuns, dupReplies, wrong)
	}
}
