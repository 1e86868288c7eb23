package device

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"termlink/device/input"
	"termlink/display/console"
	"termlink/display/lcdproc"
	"termlink/link"
)

// InputKind is what the user asked for.
type InputKind uint8

// Input kinds.
const (
	InputEdit       InputKind = iota + 1 // the text being typed is now Input.Text
	InputSend                            // send Input.Text (empty: what is being typed)
	InputScrollUp                        // page back through the conversation
	InputScrollDown                      // page forward
	InputCancel                          // cancel the newest message still waiting
	InputMode                            // the keypad's text mode is now Input.Text
	InputQuit                            // stop termd
	InputWhy                             // send with nothing typed: open the page saying why the link is offline
)

// Input is one thing the user did, from a keypad, a keyboard or a console.
type Input struct {
	Kind    InputKind
	Text    string
	Pending bool // InputEdit: the last letter is a multi-tap letter not yet committed
}

// Daemon wires a link client, a view and the user's input.
type Daemon struct {
	Client *link.Client
	View   View
	Inputs <-chan Input
	Logger *slog.Logger
	// Notify, when set, gets systemd notifications ("READY=1",
	// "WATCHDOG=1", "STOPPING=1", "STATUS=...").
	Notify func(state string)
	// Watchdog is how often to send WATCHDOG=1 (0: never).
	Watchdog time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Kiosk is the kiosk behaviour: notices, idle screen, backlight.
	Kiosk Kiosk
	// Gate, when set, is the KeyGate on the keypad's events: the key that
	// dismisses a notice or wakes the screen types nothing. Without it an
	// input dismisses and wakes and is then handled as usual.
	Gate *KeyGate
	// Hello, when set, is shown over the screen for HelloFor seconds
	// (0: HelloSeconds) or until a key, and kept as a line of the
	// conversation (e.g. "Enrolled as lobby-7" after enrollment).
	Hello    string
	HelloFor int
	// QuestionOpen, when set, is told whenever a question comes onto the
	// screen (true) and when none is open any more (false), from Run's
	// goroutine: the hook for a busy/activity tracker ("a question is
	// open": the device is in use).
	QuestionOpen func(open bool)

	m    Model
	ctlc chan func(k *kiosk) // Show and SetKiosk, for the Run loop (made lazily)
	once sync.Once
}

// ctl is the channel of changes for the Run loop.
func (d *Daemon) ctl() chan func(k *kiosk) {
	d.once.Do(func() { d.ctlc = make(chan func(k *kiosk), 8) })
	return d.ctlc
}

// Show puts text over the screen for secs seconds (or until a key), as a
// local notice, and keeps it as a line of the conversation: what the
// device says of itself (an update refused, settings applied). It does
// not wait for Run; past a few waiting, one is dropped (false).
func (d *Daemon) Show(text string, secs int) bool {
	select {
	case d.ctl() <- func(k *kiosk) { d.m.Notice(text); k.addLocal(text, secs) }:
		return true
	default:
		return false
	}
}

// SetKiosk replaces the kiosk behaviour while Run runs (pushed settings:
// the idle screen, the backlight, the notices' time); false when a few
// changes wait already.
func (d *Daemon) SetKiosk(cfg Kiosk) bool {
	select {
	case d.ctl() <- func(k *kiosk) { k.setConfig(cfg) }:
		return true
	default:
		return false
	}
}

// HelloSeconds is how long Daemon.Hello stays over the screen.
const HelloSeconds = 5

// Mirror is implemented by views that can say what the display shows
// now, for the server's screen mirror (link.Client.SetScreen).
type Mirror interface {
	Mirror() link.Screen
}

// ErrQuit is returned by Run when the user asked to stop.
var ErrQuit = errors.New("device: quit by the user")

// Run runs the client and the screen until ctx ends or the user quits.
// On the way out the screen says offline and the connection is closed
// cleanly; messages still in the outbox are sent by the next run.
//
// A final answer (reply or refusal) is confirmed to the client
// (link.Client.Delivered) only after a draw that shows it has succeeded;
// one not drawn when termd stops or crashes stays in the outbox and is
// shown by the next run, once.
func (d *Daemon) Run(ctx context.Context) error {
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	now := d.Now
	if now == nil {
		now = time.Now
	}
	notify := d.Notify
	if notify == nil {
		notify = func(string) {}
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clientDone := make(chan error, 1)
	go func() { clientDone <- d.Client.Run(cctx) }()

	// Messages left in the outbox by the last run show as queued.
	// Answers still there were given before: their questions are not
	// shown again when the server resends them.
	for _, e := range d.Client.Pending() {
		if e.IsAnswer() {
			d.m.MarkAnswered(e.QuestionID)
			continue
		}
		d.m.Sent(e.ID, e.Text)
	}
	var undrawn []string // final answers applied, not drawn yet
	k := newKiosk(d.Kiosk, now())
	if d.Hello != "" {
		d.m.Notice(d.Hello)
		secs := d.HelloFor
		if secs <= 0 {
			secs = HelloSeconds
		}
		k.addLocal(d.Hello, secs)
	}
	kt := time.NewTimer(time.Hour)
	defer kt.Stop()
	gate := d.Gate
	if gate == nil {
		gate = NewKeyGate() // never fed: inputs wake instead
	}
	asking := false // what QuestionOpen was told last
	render := func() {
		qnext := d.m.StepQuestions(now())
		next, armed := k.step(&d.m, now())
		if !qnext.IsZero() && (next.IsZero() || qnext.Before(next)) {
			next = qnext
		}
		gate.armed.Store(armed)
		gate.ask.Store(d.m.Ask != nil)
		if open := d.m.Ask != nil; open != asking {
			asking = open
			if d.QuestionOpen != nil {
				d.QuestionOpen(open)
			}
		}
		if next.IsZero() {
			kt.Stop()
		} else {
			kt.Reset(max(next.Sub(now()), time.Millisecond))
		}
		if err := d.View.Render(ctx, &d.m, now()); err != nil {
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, lcdproc.ErrNotConnected):
				// LCDd is not connected yet (at start) or again: the frame
				// is kept and drawn when it is; the lcdproc client logs
				// the connection's failures itself.
				log.Debug("drawing the screen", "err", err)
			default:
				log.Warn("drawing the screen", "err", err)
			}
			return
		}
		// Drawn: the answers may leave the outbox, the notice is shown.
		for _, id := range undrawn {
			if err := d.Client.Delivered(id); err != nil {
				log.Warn("confirming an answer to the outbox", "message_id", id, "err", err)
			}
		}
		undrawn = undrawn[:0]
		if id := k.drawn(&d.m); id != "" {
			if err := d.Client.NoticeShown(id); err != nil {
				log.Warn("confirming a notice", "notice_id", id, "err", err)
			}
		}
		if mv, ok := d.View.(Mirror); ok {
			d.Client.SetScreen(mv.Mirror())
		}
	}
	render()
	notify("READY=1")
	tick := time.NewTicker(time.Second) // the retry countdown
	defer tick.Stop()
	var watchdog <-chan time.Time
	if d.Watchdog > 0 {
		t := time.NewTicker(d.Watchdog)
		defer t.Stop()
		watchdog = t.C
	}
	events := d.Client.Events()
	lastStatus := ""
	lastReason := "" // the offline reason logged last
	var quit error
loop:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				break loop // the client stopped
			}
			switch {
			case ev.Kind == link.EventQuestion:
				if d.m.AddQuestion(*ev.Question, now()) {
					log.Info("question", "question_id", ev.Question.QuestionID, "options", len(ev.Question.Options), "timeout_seconds", ev.Question.TimeoutSeconds)
				} else {
					log.Debug("question shown or answered before, or too many waiting: not shown again", "question_id", ev.Question.QuestionID)
				}
			case ev.Kind == link.EventError && ev.QuestionID != "":
				log.Info("answer refused", "question_id", ev.QuestionID, "message_id", ev.MessageID, "code", ev.Code, "err", ev.Err)
				d.m.QuestionRefused(ev, now())
			default:
				d.m.Apply(ev)
			}
			if ev.Kind == link.EventState {
				lastReason = logReason(log, ev, lastReason)
			}
			if ev.Kind == link.EventNotice {
				log.Debug("notice for the screen", "notice_id", ev.Notice.NoticeID, "expires", ev.Expires)
				k.add(ev, now())
			}
			if ev.Final {
				undrawn = append(undrawn, ev.MessageID)
			}
			if ev.Kind == link.EventState || ev.Kind == link.EventStorage {
				s := d.m.LinkText(now())
				if d.m.Storage != "" {
					s += ", " + d.m.Storage + " (messages in memory)"
				}
				if s != lastStatus {
					lastStatus = s
					notify("STATUS=" + s)
				}
			}
			render()
		case in := <-d.Inputs:
			if in.Kind == InputQuit {
				quit = ErrQuit
				break loop
			}
			wasWhy := k.whyOpen()
			if d.Gate == nil && gate.armed.Load() {
				k.wake(now()) // no gate: the input wakes, then counts
			}
			k.touch(now())
			if in.Kind == InputWhy {
				// Opens the page with the offline reason; a second one
				// closes it (with a gate, the gate did).
				if !wasWhy && d.m.Link != link.StateConnected && d.m.Reason != "" {
					k.openWhy(now())
				}
			} else {
				d.handle(ctx, in, log)
			}
			render()
		case fn := <-d.ctl():
			fn(k)
			render()
		case key := <-gate.Keys():
			k.touch(now())
			d.questionKey(ctx, key, log, now())
			render()
		case <-gate.woke:
			k.wake(now())
			render()
		case <-gate.active:
			k.touch(now())
			if d.m.Overlay.Kind != OverlayNone || d.m.Dark {
				render()
			}
		case <-kt.C:
			render()
		case <-tick.C:
			if d.m.Link == link.StateWaiting || len(undrawn) > 0 || d.m.Overlay.Kind != OverlayNone || d.m.Ask != nil {
				render() // the countdown, a draw that failed, the clock, a notice's pages, a question's time left
			}
		case <-watchdog:
			notify("WATCHDOG=1")
		case <-ctx.Done():
			break loop
		}
	}
	notify("STOPPING=1")
	d.m.Stopping = true
	// Draw "offline" even though ctx is done: a short context of its own.
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := d.View.Render(sctx, &d.m, now()); err != nil {
		log.Warn("drawing the screen", "err", err)
	}
	scancel()
	_ = d.Client.Close()
	cancel()
	err := <-clientDone
	for range events { // answers not drawn stay in the outbox for the next run
	}
	if quit != nil {
		return quit
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// logReason logs why the link is offline at INFO when the reason
// changed since last (not at every retry), with the next try; a session
// that came up resets it. It returns the reason logged last.
func logReason(log *slog.Logger, ev link.Event, last string) string {
	switch {
	case ev.State == link.StateConnected:
		return ""
	case ev.State == link.StateWaiting && ev.Reason != "" && ev.Reason != last:
		log.Info("offline", "reason", ev.Reason, "short", link.ShortReason(ev.Reason),
			"next_try", ev.NextTry.Format("15:04:05"), "retry_in", time.Until(ev.NextTry).Round(time.Second))
		return ev.Reason
	}
	return last
}

func (d *Daemon) handle(ctx context.Context, in Input, log *slog.Logger) {
	m := &d.m
	if m.Ask != nil && d.questionInput(ctx, in, log) {
		return
	}
	switch in.Kind {
	case InputEdit:
		m.Compose, m.ComposePending = in.Text, in.Pending
	case InputMode:
		m.Mode = in.Text
	case InputSend:
		text := in.Text
		if text == "" {
			text = m.Compose
		}
		m.Compose, m.ComposePending = "", false
		text = strings.TrimSpace(text)
		if text == "" {
			return
		}
		id, err := d.Client.Send(ctx, text)
		if err != nil {
			log.Error("message not queued", "err", err)
			m.Notice("not sent: " + err.Error())
			return
		}
		m.Sent(id, text)
	case InputScrollUp:
		m.PageUp()
	case InputScrollDown:
		m.PageDown()
	case InputCancel:
		id := m.Pending()
		if id == "" {
			return
		}
		if err := d.Client.Cancel(ctx, id); err != nil {
			m.Notice("cancel: " + err.Error())
		}
	}
}

// FromActions turns a keypad's text-entry actions into inputs until ctx
// ends or actions is closed.
func FromActions(ctx context.Context, actions <-chan input.Action, out chan<- Input) {
	forward(ctx, actions, out, func(a input.Action) (Input, bool) {
		switch a.Kind {
		case input.Edit:
			return Input{Kind: InputEdit, Text: a.Text, Pending: a.Pending}, true
		case input.Send:
			return Input{Kind: InputSend, Text: a.Text}, true
		case input.ScrollUp:
			return Input{Kind: InputScrollUp}, true
		case input.ScrollDown:
			return Input{Kind: InputScrollDown}, true
		case input.ModeChange:
			return Input{Kind: InputMode, Text: a.Mode.String()}, true
		case input.SendBlank:
			return Input{Kind: InputWhy}, true
		}
		return Input{}, false
	})
}

// FromConsole turns a console's events into inputs: a submitted line is
// sent, Enter on a blank line opens why the link is offline, Ctrl-C
// cancels the message waiting for its answer, Ctrl-D quits.
func FromConsole(ctx context.Context, events <-chan console.Event, out chan<- Input) {
	forward(ctx, events, out, func(ev console.Event) (Input, bool) {
		switch ev.Kind {
		case console.Submit:
			return Input{Kind: InputSend, Text: ev.Text}, strings.TrimSpace(ev.Text) != ""
		case console.Blank:
			return Input{Kind: InputWhy}, true
		case console.Interrupt:
			return Input{Kind: InputCancel}, true
		case console.EOF:
			return Input{Kind: InputQuit}, true
		}
		return Input{}, false
	})
}

// forward converts what arrives on in and passes it on, until ctx ends or
// in is closed.
func forward[T any](ctx context.Context, in <-chan T, out chan<- Input, conv func(T) (Input, bool)) {
	for {
		select {
		case v, ok := <-in:
			if !ok {
				return
			}
			next, ok := conv(v)
			if !ok {
				continue
			}
			select {
			case out <- next:
			case <-ctx.Done():
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
