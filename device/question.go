package device

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"termlink/link"
)

// Questions (capability "choice"): the server asks the person at the
// device to pick one of a question's options (an agent's permission
// request: allow once / always / deny). The question takes the screen,
// each option under a key (1-9), with the time left counting down from
// the frame's timeout_seconds (from its arrival); one key answers, the
// glass confirms with the option's label ("✓ Allow once") for
// ConfirmFor and the conversation returns, where the question and what
// became of it stay as lines of termd's own. A question whose time runs
// out on the device is closed ("no answer in time"). A second question
// waits behind the one open. A question id shown (or answered, also
// before a restart: the answer is still in the outbox) is not shown
// again when the server resends it after a reconnect.

// ConfirmFor is how long the glass shows what became of a question (the
// option picked, "no answer in time", "question closed") before the
// conversation returns.
const ConfirmFor = 2 * time.Second

// Bounds of the questions a device keeps.
const (
	maxQueuedQuestions = 8   // waiting behind the open one; past it the newest is dropped
	maxSeenQuestions   = 256 // ids remembered as shown or answered; past it the oldest go
)

// Ask is the question open on the screen.
type Ask struct {
	Q        link.Question
	Deadline time.Time // when it closes on the device: arrival + timeout_seconds
	// Page is the page of the question the LCD shows (moved with the
	// page keys; the view wraps it around its pages).
	Page int
}

// Said is what became of the last question, shown over the screen until
// Until: the option picked, "no answer in time", "question closed".
type Said struct {
	Text  string
	Until time.Time
}

// questions is the model's question state.
type questions struct {
	queue   []Ask
	seen    map[string]bool // shown, queued or answered
	order   []string        // seen's ids, oldest first
	answers map[string]string
}

func (q *questions) see(id string) {
	if q.seen == nil {
		q.seen = map[string]bool{}
	}
	if q.seen[id] {
		return
	}
	q.seen[id] = true
	q.order = append(q.order, id)
	if over := len(q.order) - maxSeenQuestions; over > 0 {
		for _, old := range q.order[:over] {
			delete(q.seen, old)
		}
		q.order = append(q.order[:0], q.order[over:]...)
	}
}

// AddQuestion takes a question from the server at now: shown at once, or
// queued behind the open one. False when its id was shown, queued or
// answered already (a resend after a reconnect), or too many wait.
func (m *Model) AddQuestion(q link.Question, now time.Time) bool {
	if q.QuestionID == "" || len(q.Options) == 0 || m.qs.seen[q.QuestionID] {
		return false
	}
	if m.Ask != nil && len(m.qs.queue) >= maxQueuedQuestions {
		return false
	}
	m.qs.see(q.QuestionID)
	a := Ask{Q: q, Deadline: now.Add(time.Duration(q.TimeoutSeconds) * time.Second)}
	if m.Ask != nil {
		m.qs.queue = append(m.qs.queue, a)
		return true
	}
	m.open(a)
	return true
}

// MarkAnswered records that questionID was answered (an answer still in
// the outbox at start): it is not shown again.
func (m *Model) MarkAnswered(questionID string) { m.qs.see(questionID) }

// open puts a on the screen, and its text and options in the
// conversation.
func (m *Model) open(a Ask) {
	m.Ask = &a
	m.Notice("? " + a.Q.Text + " " + OptionsLine(a.Q.Options))
}

// OptionsLine lists options with their keys: "[1] Allow once [2] Deny".
func OptionsLine(opts []link.Option) string {
	var b strings.Builder
	for i, o := range opts {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "[%d] %s", i+1, o.Label)
	}
	return b.String()
}

// OptionKey returns the option of the open question under key ('1' for
// the first), if any.
func (m *Model) OptionKey(key rune) (link.Option, bool) {
	if m.Ask == nil || key < '1' || key > '9' {
		return link.Option{}, false
	}
	i := int(key - '1')
	if i >= len(m.Ask.Q.Options) {
		return link.Option{}, false
	}
	return m.Ask.Q.Options[i], true
}

// Answered closes the open question with opt, sent as the answer with
// message id answerID: the glass confirms it, the next question opens.
func (m *Model) Answered(opt link.Option, answerID string, now time.Time) {
	if m.Ask == nil {
		return
	}
	if m.qs.answers == nil {
		m.qs.answers = map[string]string{}
	}
	if len(m.qs.answers) >= maxSeenQuestions {
		clear(m.qs.answers) // the refusals of old answers lose their label only
	}
	m.qs.answers[answerID] = opt.Label
	m.close("✓ "+opt.Label, now)
}

// close ends the open question with what the glass says, and opens the
// next one still in time.
func (m *Model) close(said string, now time.Time) {
	m.Ask = nil
	m.Notice(said)
	m.Said = Said{Text: said, Until: now.Add(ConfirmFor)}
	m.next(now)
}

func (m *Model) next(now time.Time) {
	for m.Ask == nil && len(m.qs.queue) > 0 {
		a := m.qs.queue[0]
		m.qs.queue = append(m.qs.queue[:0], m.qs.queue[1:]...)
		if !now.Before(a.Deadline) {
			m.Notice("no answer in time: " + a.Q.Text)
			continue
		}
		m.open(a)
	}
}

// StepQuestions brings the questions to now: the open one closes when
// its time is up ("no answer in time"), the confirmation ends after
// ConfirmFor. It returns when the next change is due (zero: none).
func (m *Model) StepQuestions(now time.Time) (next time.Time) {
	if m.Ask != nil && !now.Before(m.Ask.Deadline) {
		m.close("no answer in time", now)
	}
	if !m.Said.Until.IsZero() && !now.Before(m.Said.Until) {
		m.Said = Said{}
	}
	if m.Ask != nil {
		next = m.Ask.Deadline
	}
	if !m.Said.Until.IsZero() && (next.IsZero() || m.Said.Until.Before(next)) {
		next = m.Said.Until
	}
	return next
}

// Asking reports whether a question (or what became of one) is on the
// screen.
func (m *Model) Asking() bool { return m.Ask != nil || m.Said.Text != "" }

// QuestionRefused shows why the server refused an answer (an EventError
// with QuestionID: the question was closed, is unknown, or the option is
// not one of its).
func (m *Model) QuestionRefused(ev link.Event, now time.Time) {
	label := m.qs.answers[ev.MessageID]
	delete(m.qs.answers, ev.MessageID)
	why := RefusalText(ev.Code)
	text := why
	if label != "" {
		text = why + ": " + label + " not sent"
	}
	m.Notice(text)
	if m.Ask == nil {
		m.Said = Said{Text: why, Until: now.Add(ConfirmFor)}
	}
}

// RefusalText says in short (16 columns) why an answer was refused.
func RefusalText(code string) string {
	switch code {
	case link.CodeQuestionClosed:
		return "question closed"
	case link.CodeQuestionUnknown:
		return "question unknown"
	case link.CodeBadAnswer:
		return "answer refused"
	}
	return "answer not taken"
}

// TimeLeft is the open question's time left on 3 cells: "42s", "12m",
// "3h".
func TimeLeft(now, deadline time.Time) string {
	s := secondsUntil(now, deadline)
	switch {
	case s <= 99:
		return fmt.Sprintf("%ds", s)
	case s <= 99*60:
		return fmt.Sprintf("%dm", (s+59)/60)
	}
	return fmt.Sprintf("%dh", (s+3599)/3600)
}

// questionKey takes a key pressed while a question is open (the KeyGate
// passes it): 1-9 answer with that option, the page keys turn the
// question's pages; any other key does nothing.
func (d *Daemon) questionKey(ctx context.Context, key rune, log *slog.Logger, now time.Time) {
	m := &d.m
	if m.Ask == nil {
		return
	}
	switch {
	case strings.ContainsRune(QuestionNextKeys, key):
		m.Ask.Page++
	case strings.ContainsRune(QuestionPrevKeys, key):
		m.Ask.Page--
	default:
		if opt, ok := m.OptionKey(key); ok {
			d.answer(ctx, opt, log, now)
		}
	}
}

// questionInput takes an input while a question is open: a line that is
// an option's number ("2", from the console) answers; the scroll inputs
// turn the question's pages. False: the input is handled as usual (a
// message typed on the console goes out as ever).
func (d *Daemon) questionInput(ctx context.Context, in Input, log *slog.Logger) bool {
	m := &d.m
	switch in.Kind {
	case InputSend:
		text := strings.TrimSpace(in.Text)
		if text == "" {
			text = strings.TrimSpace(m.Compose)
		}
		if r := []rune(text); len(r) == 1 {
			if opt, ok := m.OptionKey(r[0]); ok {
				if in.Text == "" {
					m.Compose, m.ComposePending = "", false
				}
				d.answer(ctx, opt, log, d.clock())
				return true
			}
		}
	case InputScrollUp:
		m.Ask.Page--
		return true
	case InputScrollDown:
		m.Ask.Page++
		return true
	}
	return false
}

// answer sends opt as the answer to the open question (through the
// client's outbox) and closes it on the glass.
func (d *Daemon) answer(ctx context.Context, opt link.Option, log *slog.Logger, now time.Time) {
	m := &d.m
	qid := m.Ask.Q.QuestionID
	id, err := d.Client.Answer(ctx, qid, opt.ID)
	if err != nil {
		log.Error("answer not stored", "question_id", qid, "err", err)
		m.Notice("not sent: " + err.Error())
		return
	}
	log.Info("question answered", "question_id", qid, "option_id", opt.ID, "message_id", id)
	m.Answered(opt, id, now)
}

func (d *Daemon) clock() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}
