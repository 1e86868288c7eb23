package termd

import (
	"context"
	"sync"

	"termlink/device"
	"termlink/link"
)

// Fleet operations on the device (issue 28): the server's update,
// settings and diag requests arrive on the client's Fleet channel, apart
// from the conversation; runFleet hands each to its handler. A handler
// that is nil is a capability termd does not list in connect (update
// needs the supervisor and a pinned release key). The handlers answer
// with client.Report.
type fleetHandlers struct {
	update   func(ctx context.Context, f *link.Update)   // update.go
	settings func(ctx context.Context, f *link.Settings) // settings.go
	diag     func(ctx context.Context, f *link.Diag)     // diag.go
}

// caps are the capabilities the handlers add to connect.
func (h *fleetHandlers) caps() []string {
	var caps []string
	if h.update != nil {
		caps = append(caps, link.CapUpdate)
	}
	if h.settings != nil {
		caps = append(caps, link.CapSettings)
	}
	if h.diag != nil {
		caps = append(caps, link.CapDiag)
	}
	return caps
}

// runFleet serves the client's fleet requests until ctx ends or the
// client's Run returns. Settings are applied in turn; an update and a
// diag request each run on a goroutine of their own (an update takes
// minutes, a self-test seconds), which runFleet waits for on its way out.
func runFleet(ctx context.Context, client *link.Client, h *fleetHandlers) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var f link.Frame
		var ok bool
		select {
		case <-ctx.Done():
			return
		case f, ok = <-client.Fleet():
			if !ok {
				return
			}
		}
		switch f := f.(type) {
		case *link.Update:
			if h.update != nil {
				wg.Add(1)
				go func() { defer wg.Done(); h.update(ctx, f) }()
			}
		case *link.Settings:
			if h.settings != nil {
				h.settings(ctx, f)
			}
		case *link.Diag:
			if h.diag != nil {
				wg.Add(1)
				go func() { defer wg.Done(); h.diag(ctx, f) }()
			}
		}
	}
}

// fleetCaps are the fleet capabilities this termd lists: each handler
// setFleetHandlers will set.
func (s *setup) fleetCaps() []string {
	var h fleetHandlers
	s.setFleetHandlers(&h, nil, nil, "", "")
	return h.caps()
}

// setFleetHandlers sets the handlers of the fleet operations termd
// takes. With a nil client it only says which (fleetCaps): each
// handler's constructor must decide from the config alone.
func (s *setup) setFleetHandlers(h *fleetHandlers, client *link.Client, d *device.Daemon, wsURL, token string) {
	h.update = s.updateHandler(client, d, wsURL, token) // update.go
	h.settings = s.settingsHandler(client, d)           // settings.go
	h.diag = s.diagHandler(client, d)                   // diag.go
}
