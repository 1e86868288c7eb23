package termd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"periph.io/x/conn/v3/i2c"

	"termlink/boards"
	"termlink/device"
	"termlink/device/logring"
	"termlink/display/hd44780"
	"termlink/link"
	"termlink/testrig/checks"
)

// Logs and self-tests on demand (issue 28): termd lists "diag" and
// answers the server's diag frames with a diag_result on the live
// connection.
//
//   - "logs": the end of termd's log, kept in memory (package logring,
//     fed by the log handler openLog makes), at most the request's bytes
//     and link.MaxDiagBytes, from a line boundary.
//   - "selftest": the board's checks that need no person and that are
//     safe while termd drives the board, printed as `termrig selftest -v`
//     prints its report; OK when every check passed. One runs at a time:
//     a second request meanwhile gets the error "a self-test is running".
//
// The checks run (selftestSteps):
//
//	i2c-backpack  the LCD's backpack acknowledges its address: a one-byte
//	              read (checks.Probe), which does not change what a
//	              PCF8574 drives (hd44780-i2c boards; N/A otherwise)
//	display       the driver's transactions, (re)initialisations and
//	              write errors; fails when it met write errors since
//	              termd started or since the previous self-test (an
//	              HD44780 driver; N/A for a console or LCDd)
//	state-dir     the state dir takes a file (written, synced, removed)
//	              and its file system has MinFreeBytes free
//	clock         the clock is set (not before 2024: a Pi without a
//	              real-time clock reads 1970 until NTP answers)
//	link          the session's own figures: connected, sessions
//	              (reconnects), heartbeats answered, messages in the
//	              outbox, events dropped
//
// Left out, with why: lcd-test draws patterns over what the display
// shows (it would disturb the kiosk, and the driver owns the glass);
// keypad-test needs a person (and the scanner owns the lines: reading
// them beside it could miss or make presses; stuck keys are logged by
// the scanner when it sees one); serial-loopback and gpio-loopback need
// a jumper or wired pins, and the serial port may be the console
// termd draws on; link-test opens a second session as another peer
// (the link check above reports this session's figures instead).

// MinFreeBytes is the free space the state-dir check asks for: room for
// the outbox and the settings termd writes there.
const MinFreeBytes = 4 << 20

// selftestTimeout bounds one self-test.
const selftestTimeout = 30 * time.Second

// diagHandler is the handler of diag frames; with a nil client a no-op,
// so that fleetCaps lists "diag".
func (s *setup) diagHandler(client *link.Client, d *device.Daemon) func(context.Context, *link.Diag) {
	if client == nil {
		return func(context.Context, *link.Diag) {}
	}
	dg := &diagnoser{report: client.Report, linkState: func() (link.Status, link.ClientStats) { return client.Status(), client.Stats() },
		ring: s.ring, stateDir: s.cfg.StateDir, log: s.log, now: time.Now}
	if d != nil {
		dg.view = d.View
	}
	if s.profile != nil && s.profile.Display.Kind == boards.HD44780I2C {
		dg.noBus = "the board's I2C bus is not open"
		if s.hw != nil {
			if p := s.hw.Parts(); p != nil && p.Bus != nil {
				dg.bus, dg.addr = p.Bus, p.Addr
			}
		}
	}
	return dg.handle
}

// diagnoser answers diag frames.
type diagnoser struct {
	report    func(link.Frame) error
	linkState func() (link.Status, link.ClientStats)
	ring      *logring.Ring // nil: no log kept in memory
	stateDir  string
	view      device.View // the display's figures, when an HD44780 driver
	bus       i2c.Bus     // the backpack's bus (hd44780-i2c), nil otherwise
	noBus     string      // why bus is nil, when not "the display is not an I2C LCD"
	addr      uint16
	log       *slog.Logger
	now       func() time.Time

	mu         sync.Mutex
	running    bool // a self-test runs
	lastErrors int  // the display's write errors at the previous self-test
	tested     bool // a self-test ran before
}

// handle answers one diag frame.
func (dg *diagnoser) handle(ctx context.Context, f *link.Diag) {
	res := &link.DiagResult{RequestID: f.RequestID, Kind: f.Kind}
	switch f.Kind {
	case link.DiagLogs:
		dg.logs(f, res)
	case link.DiagSelftest:
		dg.selftest(ctx, res)
	default:
		res.Error = fmt.Sprintf("unknown diag kind %q (this termd knows %s and %s)", f.Kind, link.DiagLogs, link.DiagSelftest)
	}
	if ctx.Err() != nil {
		return // termd is stopping
	}
	if err := dg.report(res); err != nil {
		dg.log.Warn("diag result not sent", "request_id", f.RequestID, "kind", f.Kind, "err", err)
		return
	}
	if res.Error != "" {
		dg.log.Warn("diag answered with an error", "request_id", f.RequestID, "kind", f.Kind, "err", res.Error)
		return
	}
	dg.log.Info("diag answered", "request_id", f.RequestID, "kind", f.Kind, "bytes", len(res.Text), "ok", res.OK)
}

// logs sets res to the log's end.
func (dg *diagnoser) logs(f *link.Diag, res *link.DiagResult) {
	if dg.ring == nil {
		res.Error = "this termd keeps no log in memory"
		return
	}
	n := f.Bytes
	if n <= 0 || n > link.MaxDiagBytes {
		n = link.MaxDiagBytes
	}
	// A line cut in a character is mended; the text never grows.
	res.Text = strings.ToValidUTF8(string(dg.ring.Tail(n)), "?")
	res.OK = true
}

// selftest runs the checks and sets res to the report.
func (dg *diagnoser) selftest(ctx context.Context, res *link.DiagResult) {
	dg.mu.Lock()
	if dg.running {
		dg.mu.Unlock()
		res.Error = "a self-test is running"
		return
	}
	dg.running = true
	dg.mu.Unlock()
	defer func() {
		dg.mu.Lock()
		dg.running = false
		dg.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, selftestTimeout)
	defer cancel()
	rep := checks.Selftest(ctx, dg.selftestSteps(), nil)
	var b bytes.Buffer
	_ = rep.WriteText(&b, true)
	text := b.String()
	if len(text) > link.MaxDiagBytes {
		text = text[:link.MaxDiagBytes]
	}
	res.Text, res.OK = strings.ToValidUTF8(text, "?"), rep.Pass
}

// selftestSteps are the checks of the remote self-test (see the top of
// this file).
func (dg *diagnoser) selftestSteps() []checks.Step {
	steps := []checks.Step{{Name: "i2c-backpack"}, {Name: "display"}}
	if dg.bus == nil {
		steps[0].NotApplicable = "the display is not an I2C LCD"
		if dg.noBus != "" {
			steps[0].NotApplicable = dg.noBus
		}
	} else {
		steps[0].Run = dg.checkBackpack
	}
	if _, ok := dg.displayStats(); ok {
		steps[1].Run = dg.checkDisplay
	} else {
		steps[1].NotApplicable = "the display's driver keeps no error count (not an HD44780)"
	}
	return append(steps,
		checks.Step{Name: "state-dir", Run: dg.checkStateDir},
		checks.Step{Name: "clock", Run: dg.checkClock},
		checks.Step{Name: "link", Run: dg.checkLink})
}

func (dg *diagnoser) checkBackpack(context.Context) checks.Result {
	r := checks.Result{Name: "i2c-backpack", Pass: true}
	if err := checks.Probe(dg.bus, dg.addr); err != nil {
		r.Fail("nothing acknowledges 0x%02X on %s: %v (is the backpack wired and powered?)", dg.addr, dg.bus, err)
		return r
	}
	r.Summary = fmt.Sprintf("0x%02X answers (%s)", dg.addr, checks.LikelyPart(dg.addr))
	return r
}

// displayStats are the HD44780 driver's figures, when the view draws on one.
func (dg *diagnoser) displayStats() (hd44780.Stats, bool) {
	v, ok := dg.view.(*device.LCDView)
	if !ok || v == nil {
		return hd44780.Stats{}, false
	}
	s, ok := v.Screen.(interface{ Stats() hd44780.Stats })
	if !ok {
		return hd44780.Stats{}, false
	}
	return s.Stats(), true
}

func (dg *diagnoser) checkDisplay(context.Context) checks.Result {
	st, _ := dg.displayStats()
	r := checks.Result{Name: "display", Pass: true}
	dg.mu.Lock()
	since, newErrs := "termd started", st.Errors-dg.lastErrors
	if dg.tested {
		since = "the previous self-test"
	}
	dg.lastErrors, dg.tested = st.Errors, true
	dg.mu.Unlock()
	if newErrs > 0 {
		r.Fail("%d write errors since %s (the driver re-initialises the display after each): check the wiring and the supply", newErrs, since)
	} else {
		r.Summary = fmt.Sprintf("no write errors since %s", since)
	}
	r.Set("transactions", float64(st.Tx))
	r.Set("inits", float64(st.Inits))
	r.Set("write_errors", float64(st.Errors))
	return r
}

func (dg *diagnoser) checkStateDir(context.Context) checks.Result {
	r := checks.Result{Name: "state-dir", Pass: true}
	if err := probeWrite(dg.stateDir); err != nil {
		r.Fail("%s takes no file: %v", dg.stateDir, err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dg.stateDir, &fs); err != nil {
		r.Fail("free space of %s: %v", dg.stateDir, err)
		return r
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	r.Set("free_bytes", float64(free))
	if free < MinFreeBytes {
		r.Fail("%s has %d KiB free, less than %d KiB: messages and settings may not be kept", dg.stateDir, free>>10, MinFreeBytes>>10)
	}
	if r.Pass {
		r.Summary = fmt.Sprintf("%s writable, %d MiB free", dg.stateDir, free>>20)
	}
	return r
}

// probeWrite writes, syncs and removes a small file in dir.
func probeWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".selftest-*")
	if err != nil {
		return err
	}
	name := f.Name()
	defer os.Remove(name)
	_, err = f.Write(make([]byte, 4096))
	err = errors.Join(err, f.Sync(), f.Close())
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(name), err)
	}
	return os.Remove(name)
}

// clockFloor: a clock before it is not set.
var clockFloor = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func (dg *diagnoser) checkClock(context.Context) checks.Result {
	now := dg.now()
	r := checks.Result{Name: "clock", Pass: true, Summary: now.UTC().Format(time.RFC3339)}
	if now.Before(clockFloor) {
		r.Fail("the clock reads %s: not set (no real-time clock, and NTP has not answered yet?)", now.UTC().Format(time.RFC3339))
	}
	return r
}

func (dg *diagnoser) checkLink(context.Context) checks.Result {
	st, cs := dg.linkState()
	r := checks.Result{Name: "link", Pass: true}
	if st.State != link.StateConnected {
		r.Fail("not connected (%s)", st.State)
	} else {
		r.Summary = fmt.Sprintf("connected; %d reconnects, %d heartbeats answered, %d messages in the outbox", max(cs.Sessions-1, 0), cs.Pongs, cs.Pending)
	}
	r.Set("sessions", float64(cs.Sessions))
	r.Set("dials", float64(cs.Dials))
	r.Set("pongs", float64(cs.Pongs))
	r.Set("outbox", float64(cs.Pending))
	r.Set("unconfirmed", float64(cs.Unconfirmed))
	r.Set("dropped_events", float64(cs.DroppedEvents))
	return r
}
