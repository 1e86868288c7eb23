package rollout

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"termlink/link"
	"termlink/server/httpapi"
	"termlink/server/registry"
)

// Updates that wait for the person (issue 42). A released device's
// update frame is held while
//
//   - the rollout has a maintenance window (Window "HH:MM-HH:MM", in UTC
//     or, with Zone "device", in the zone the device reported in its busy
//     frame, else UTC; a window past midnight such as 22:00-04:00 spans
//     it) and the time is outside it: the device waits as Waiting with
//     Reason WaitWindow ("waiting: window");
//   - the device said it is in use (its busy frame, kept in the
//     registry: a run in progress, a question open, keys pressed a moment
//     ago): Waiting with Reason WaitInUse ("waiting: in use").
//
// A waiting device is tried again on every tick and whenever its busy
// frame says it is idle; it is sent its frame once neither holds. Force
// sends regardless of both: an operator who must. Past the canaries a
// device waiting in use counts as settled for the next wave (as an
// offline one does: it gets the release when it is idle); one waiting
// for the window never does, so no further wave goes out of it.
const (
	Waiting    = "waiting"
	WaitInUse  = "in use"
	WaitWindow = "window"
)

// Zones a window is read in.
const (
	ZoneUTC    = "utc"
	ZoneDevice = "device"
)

// zoneGrace is how long after its connect a device of a rollout whose
// window is in the devices' zone is given to say its zone (its busy
// frame, sent first on every connect) before it is taken for UTC.
const zoneGrace = 5 * time.Second

// parseWindow reads "HH:MM-HH:MM" (24-hour) into minutes of the day;
// start and end differ (a window of no time, or of the whole day, is
// refused: leave the window out to send at any time).
func parseWindow(s string) (start, end int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("window %q: want HH:MM-HH:MM (24-hour, such as 02:00-05:00)", httpapi.TruncateUTF8(s, 40))
	}
	if start, err = parseClock(a); err == nil {
		end, err = parseClock(b)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("window %q: %v", httpapi.TruncateUTF8(s, 40), err)
	}
	if start == end {
		return 0, 0, fmt.Errorf("window %q: it starts where it ends (leave the window out to send at any time)", s)
	}
	return start, end, nil
}

// parseClock reads HH:MM into minutes of the day.
func parseClock(s string) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	if !ok || len(h) != 2 || len(m) != 2 {
		return 0, fmt.Errorf("%q is not HH:MM", httpapi.TruncateUTF8(s, 20))
	}
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if err1 != nil || err2 != nil || h[0] == '+' || h[0] == '-' || m[0] == '+' || m[0] == '-' || hh > 23 || mm > 59 {
		return 0, fmt.Errorf("%q is not a time of day from 00:00 to 23:59", s)
	}
	return hh*60 + mm, nil
}

// checkWindow checks a request's window, zone and force.
func checkWindow(window, zone string) error {
	if window == "" {
		if zone != "" {
			return fmt.Errorf("zone %q: a zone is for a window (give window too)", httpapi.TruncateUTF8(zone, 40))
		}
		return nil
	}
	if _, _, err := parseWindow(window); err != nil {
		return err
	}
	switch zone {
	case "", ZoneUTC, ZoneDevice:
		return nil
	}
	return fmt.Errorf("zone %q: want %q (the default) or %q (the zone each device reports, else UTC)", httpapi.TruncateUTF8(zone, 40), ZoneUTC, ZoneDevice)
}

// inWindow reports whether now, read at offset seconds east of UTC, is
// inside the window (start inclusive, end exclusive).
func inWindow(window string, now time.Time, offset int) bool {
	start, end, err := parseWindow(window)
	if err != nil {
		return true // checked when the rollout was made or loaded
	}
	t := now.UTC().Add(time.Duration(offset) * time.Second)
	min := t.Hour()*60 + t.Minute()
	if start < end {
		return start <= min && min < end
	}
	return min >= start || min < end // past midnight
}

// holdLocked says why d's update frame waits now (WaitWindow, WaitInUse),
// or "" when it may go.
func (m *Manager) holdLocked(r *Rollout, d *Device) string {
	if r.Force {
		return ""
	}
	p, known := m.opt.Devices.Get(r.ChannelID, d.PeerID)
	online := known && p.Online
	if r.Window != "" {
		offset := 0
		if r.Zone == ZoneDevice && online {
			switch {
			case p.Busy != nil && p.Busy.UTCOffset != nil:
				offset = *p.Busy.UTCOffset
			case p.Busy == nil && m.justConnected(p):
				return WaitWindow // its zone is on its way
			}
		}
		if !inWindow(r.Window, m.now(), offset) {
			return WaitWindow
		}
	}
	if online && p.Busy != nil && p.Busy.Busy {
		return WaitInUse
	}
	return ""
}

// justConnected reports whether p connected less than zoneGrace ago.
func (m *Manager) justConnected(p registry.Peer) bool {
	if p.ConnectedSince == nil {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, *p.ConnectedSince)
	return err == nil && m.now().Sub(t) < zoneGrace
}

// waitLocked keeps d waiting for why (its frame not sent).
func (m *Manager) waitLocked(e *entry, d *Device, why string) {
	if d.State == Waiting && d.Reason == why {
		return
	}
	m.setLocked(e, d, Waiting, why)
	if d.Attempt == 0 {
		d.Attempt = 1
	}
}

// Busy is the part of the fleet operations that takes the devices' busy
// frames (link.Busy: from a connection that listed "update", at the
// answer rate: wschannel's route): each is kept in the registry
// (Devices.SetBusy) for the console and the rollouts, and a device that
// says it is idle while a rollout holds its frame for it is sent it now.
func (m *Manager) Busy() BusyPart { return BusyPart{m} }

// BusyPart is Manager.Busy's part.
type BusyPart struct{ m *Manager }

// DeviceConnected implements the part (the rollouts get the connect).
func (BusyPart) DeviceConnected(string, *link.Connect) {}

// Answers is the frame the part takes: busy.
func (BusyPart) Answers() link.Type { return link.TypeBusy }

// Report takes a busy frame: kept in the registry; refused when the
// device is not online here (nothing changed).
func (b BusyPart) Report(channelID, peerID string, f link.Frame) (bool, error) {
	bf, ok := f.(*link.Busy)
	if !ok {
		return false, fmt.Errorf("the busy part takes busy frames, not %s", f.FrameType())
	}
	m := b.m
	if !m.opt.Devices.SetBusy(channelID, peerID, registry.BusyState{Busy: bf.Busy, Why: bf.Why, UTCOffset: bf.UTCOffset}) {
		return false, fmt.Errorf("%s is not a connected device of channel %s", peerID, channelID)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, d := m.findLocked(channelID, peerID); e != nil && e.r.State == Running && d.State == Waiting {
		m.sendLocked(e, d)
		m.advanceLocked(e)
		if m.dirty[e.r.ID] {
			m.poke()
		}
	}
	return true, nil
}
