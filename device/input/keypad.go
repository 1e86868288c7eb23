package input

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"periph.io/x/conn/v3/gpio"
)

// Opts configures a Keypad.
type Opts struct {
	// Keymap labels the keys; its size must match the pins. Required.
	Keymap Keymap
	// Timing: debounce, auto-repeat, stuck keys.
	Timing
	// ScanInterval is the time between scans while a key is down or being
	// debounced; default 5ms.
	ScanInterval time.Duration
	// StuckPoll is the time between scans while only stuck keys (or a
	// faulty column) are down; default 250ms.
	StuckPoll time.Duration
	// Settle is how long to wait after driving a row low before reading
	// the columns; default 10µs, negative for none.
	Settle time.Duration
	// EdgeTimeout bounds each wait for an edge, so Run stops within it;
	// default 200ms.
	EdgeTimeout time.Duration
	// Buffer is the capacity of the events channel; default 32.
	Buffer int
	// Now is the clock for event times; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Keypad scans a matrix keypad wired to GPIO pins: rows are outputs,
// columns are inputs with pull-ups. While no key is down all rows are
// driven low and Run sleeps in WaitForEdge on the columns (no polling); a
// falling edge starts scanning, one row low at a time, until every key is
// released again.
//
// Without diodes a matrix cannot tell which keys are down when three of
// them form a rectangle; that is reported as a Ghost event. See
// https://www.dribin.org/dave/keyboard/one_html/ for the electrical
// background.
type Keypad struct {
	rows   []gpio.PinOut
	cols   []gpio.PinIn
	o      Opts
	m      *Matrix
	events chan Event
	ran    atomic.Bool
	fault  []bool // column reads low with no row driven
}

// New returns a Keypad on the given row (output) and column (input) pins.
// It does not touch the pins until Run.
func New(rows []gpio.PinOut, cols []gpio.PinIn, opts Opts) (*Keypad, error) {
	nr, nc := opts.Keymap.Size()
	if nr == 0 {
		return nil, errors.New("input: keypad needs a keymap")
	}
	if len(rows) != nr || len(cols) != nc {
		return nil, fmt.Errorf("input: keymap %s is %dx%d but %d row and %d column pins were given", opts.Keymap, nr, nc, len(rows), len(cols))
	}
	for i, p := range rows {
		if p == nil {
			return nil, fmt.Errorf("input: keypad row pin %d is nil", i)
		}
	}
	for i, p := range cols {
		if p == nil {
			return nil, fmt.Errorf("input: keypad column pin %d is nil", i)
		}
	}
	if opts.ScanInterval <= 0 {
		opts.ScanInterval = 5 * time.Millisecond
	}
	if opts.StuckPoll <= 0 {
		opts.StuckPoll = 250 * time.Millisecond
	}
	if opts.Settle == 0 {
		opts.Settle = 10 * time.Microsecond
	}
	if opts.EdgeTimeout <= 0 {
		opts.EdgeTimeout = 200 * time.Millisecond
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 32
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Keypad{
		rows:   rows,
		cols:   cols,
		o:      opts,
		m:      NewMatrix(opts.Keymap, opts.Timing),
		events: make(chan Event, opts.Buffer),
		fault:  make([]bool, len(cols)),
	}, nil
}

func (k *Keypad) String() string {
	return fmt.Sprintf("keypad %dx%d (%s)", len(k.rows), len(k.cols), k.o.Keymap)
}

// Events returns the key events. It is closed when Run returns.
func (k *Keypad) Events() <-chan Event { return k.events }

// Run configures the pins and scans until ctx is done or a pin fails. It
// can be called once.
func (k *Keypad) Run(ctx context.Context) error {
	if !k.ran.CompareAndSwap(false, true) {
		return errors.New("input: keypad Run called twice")
	}
	defer close(k.events)
	for i, p := range k.cols {
		if err := p.In(gpio.PullUp, gpio.FallingEdge); err != nil {
			return fmt.Errorf("input: keypad column %d (%s): set input with pull-up and edge detection: %w", i, p, err)
		}
	}
	if err := k.drive(gpio.Low); err != nil {
		return err
	}

	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	edges := make(chan struct{}, 1)
	for _, p := range k.cols {
		wg.Add(1)
		go k.watch(wctx, p, edges, &wg)
	}

	for {
		// Idle: all rows low, wait for a column to fall.
		if !k.anyColumnLow() {
			drain(edges)
			if !k.anyColumnLow() {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-edges:
				}
				if !k.anyColumnLow() {
					continue // a bounce, a release, or a poll tick
				}
			}
		}
		if err := k.scanUntilIdle(ctx, edges); err != nil {
			return err
		}
	}
}

// watch turns edges on one column into a signal on edges. WaitForEdge has
// a timeout so the goroutine notices ctx.
func (k *Keypad) watch(ctx context.Context, p gpio.PinIn, edges chan<- struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	quick := 0
	for ctx.Err() == nil {
		start := time.Now()
		if p.WaitForEdge(k.o.EdgeTimeout) {
			quick = 0
			signal(edges)
			continue
		}
		if time.Since(start) >= k.o.EdgeTimeout/4 {
			quick = 0
			continue
		}
		// WaitForEdge returns at once: the pin has no edge detection.
		// Fall back to polling at a gentle rate.
		if quick++; quick == 3 {
			k.o.Logger.Warn("input: keypad column has no edge detection; polling", "pin", p.String())
		}
		signal(edges)
		select {
		case <-ctx.Done():
		case <-time.After(k.o.EdgeTimeout / 4):
		}
	}
}

func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// scanUntilIdle scans while any key is down or being debounced.
func (k *Keypad) scanUntilIdle(ctx context.Context, edges <-chan struct{}) error {
	pressed := make([][]bool, len(k.rows))
	for r := range pressed {
		pressed[r] = make([]bool, len(k.cols))
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		faults, err := k.scan(pressed)
		if err != nil {
			return err
		}
		now := k.o.Now()
		evs := faults
		evs = append(evs, k.m.Update(now, pressed)...)
		for _, ev := range evs {
			select {
			case k.events <- ev:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		anyFault := false
		for _, f := range k.fault {
			anyFault = anyFault || f
		}
		if !k.m.Active() && !anyFault {
			return nil
		}
		if k.m.OnlyStuck() || (anyFault && !k.m.Active()) {
			// Nothing but faults: scan slowly, or sooner on a new press.
			// Our own scan makes edges on the faulty lines; let them pass
			// before listening.
			timer.Reset(4 * k.o.ScanInterval)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
			drain(edges)
			timer.Reset(k.o.StuckPoll)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			case <-edges:
				if !timer.Stop() {
					<-timer.C
				}
			}
			continue
		}
		timer.Reset(k.o.ScanInterval)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// scan reads the whole matrix into pressed. It returns Stuck events for
// columns that newly read low with no row driven. All rows are left low.
func (k *Keypad) scan(pressed [][]bool) ([]Event, error) {
	if err := k.drive(gpio.High); err != nil {
		return nil, err
	}
	k.settle()
	var evs []Event
	for c, p := range k.cols {
		low := p.Read() == gpio.Low
		if low && !k.fault[c] {
			evs = append(evs, Event{Kind: Stuck, Row: -1, Col: c, Time: k.o.Now(),
				Detail: fmt.Sprintf("column %d (%s) reads low with no row driven: short to ground or a missing pull-up?", c, p)})
		}
		if !low && k.fault[c] {
			k.o.Logger.Info("input: keypad column reads high again", "col", c, "pin", p.String())
		}
		k.fault[c] = low
	}
	for r, row := range k.rows {
		if err := row.Out(gpio.Low); err != nil {
			return nil, fmt.Errorf("input: keypad row %d (%s): drive low: %w", r, row, err)
		}
		k.settle()
		for c, p := range k.cols {
			pressed[r][c] = !k.fault[c] && p.Read() == gpio.Low
		}
		if err := row.Out(gpio.High); err != nil {
			return nil, fmt.Errorf("input: keypad row %d (%s): drive high: %w", r, row, err)
		}
	}
	return evs, k.drive(gpio.Low)
}

func (k *Keypad) settle() {
	if k.o.Settle > 0 {
		time.Sleep(k.o.Settle)
	}
}

func (k *Keypad) drive(l gpio.Level) error {
	for r, row := range k.rows {
		if err := row.Out(l); err != nil {
			return fmt.Errorf("input: keypad row %d (%s): drive %s: %w", r, row, l, err)
		}
	}
	return nil
}

// anyColumnLow reads the columns with all rows low.
func (k *Keypad) anyColumnLow() bool {
	for _, p := range k.cols {
		if p.Read() == gpio.Low {
			return true
		}
	}
	return false
}
