package termd

import (
	"context"
	"slices"
	"time"

	"termlink/device"
	"termlink/device/activity"
	"termlink/link"
)

// Updates that wait for the person (issue 42): termd tracks whether a
// conversation is live (package device/activity: a message sent and not
// yet replied, a question open, a key pressed in the last busy_seconds,
// a pushed setting, 60 by default) and, when it lists "update", reports
// it to the server (the busy frame: first on every connect, then each
// change, at most one a second), so that a rollout holds its update
// while the device is in use. termd itself never restarts into a release
// while busy: the update is downloaded and staged at once, and the
// supervisor told to restart into it at the next idle moment
// (update.Options.WaitIdle).
//
// The question screen says when a question opens and closes with
// s.busy.SetQuestionOpen (device.Daemon.QuestionOpen, set in termd.go).

// startBusy makes the tracker of client's device (s.busy) and returns
// the keypad's inputs as the daemon is to read them: each one, passed on,
// is a key pressed. Until ctx ends it reports the device's use to the
// server when the client lists "update"; done is closed once both
// goroutines have returned.
func (s *setup) startBusy(ctx context.Context, client *link.Client, inputs <-chan device.Input) (keys <-chan device.Input, done <-chan struct{}) {
	t := activity.New(func() int { return len(client.Pending()) }, s.settings.keyWindow())
	s.busy = t
	s.settings.setTracker(t)
	out := make(chan device.Input)
	fin := make(chan struct{})
	reporting := slices.Contains(s.fleetCaps(), link.CapUpdate)
	go func() {
		defer close(fin)
		defer t.Stop()
		rdone := make(chan struct{})
		go func() {
			defer close(rdone)
			if reporting {
				t.Report(ctx, func(busy bool, why string) {
					_, off := time.Now().Zone()
					if err := client.Report(&link.Busy{Busy: busy, Why: why, UTCOffset: &off}); err != nil {
						s.log.Warn("busy state not reported", "err", err)
					}
				})
			}
		}()
		defer func() { <-rdone }()
		passKeys(ctx, t, inputs, out)
	}()
	return out, fin
}

// passKeys passes each input from in to out, telling t of it, until ctx
// ends or in is closed (then out is closed too).
func passKeys(ctx context.Context, t *activity.Tracker, in <-chan device.Input, out chan<- device.Input) {
	for {
		select {
		case <-ctx.Done():
			return
		case k, ok := <-in:
			if !ok {
				close(out)
				return
			}
			t.KeyPressed()
			select {
			case out <- k:
			case <-ctx.Done():
				return
			}
		}
	}
}

// keyWindow is how long a key keeps the device busy: the applied
// settings' busy_seconds, else activity.DefaultKeyWindow.
func (p *pushed) keyWindow() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return keyWindowFor(p.applied)
}

func keyWindowFor(f *link.Settings) time.Duration {
	if f == nil || f.BusySeconds == nil || *f.BusySeconds == 0 {
		return activity.DefaultKeyWindow
	}
	return time.Duration(*f.BusySeconds) * time.Second
}

// setTracker gives the settings the tracker whose key window they set.
func (p *pushed) setTracker(t *activity.Tracker) {
	p.mu.Lock()
	p.tracker = t
	p.mu.Unlock()
}
