package device

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"termlink/boards"
	"termlink/device/input"
	"termlink/display/lcdproc"
)

// NewLCDproc makes the LCDd client of an lcdproc profile (not connected
// yet: its Run connects and reconnects) and the map from the key names
// LCDd reports to keypad key presses.
func NewLCDproc(ctx context.Context, p *boards.Profile, log *slog.Logger) (*lcdproc.Dev, map[string]input.Binding, error) {
	d := p.Display
	if d.Kind != boards.LCDproc {
		return nil, nil, fmt.Errorf("board %s: display kind %q is not lcdproc", p.Name, d.Kind)
	}
	keys := make(map[string]input.Binding, len(d.Keys))
	names := make([]string, 0, len(d.Keys))
	for name, v := range d.Keys {
		b, err := input.ParseBinding(v)
		if err != nil {
			return nil, nil, fmt.Errorf("board %s: display.keys.%s: %w", p.Name, name, err)
		}
		keys[name] = b
		names = append(names, name)
	}
	sort.Strings(names)
	o := lcdproc.Opts{Address: d.Address.Host, Name: "termd", Rows: d.Rows, Cols: d.Cols, Keys: names, Logger: log}
	// Ask LCDd for its size now, so that the first frames fit; if it is
	// not up yet, the profile's size holds until it answers.
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	hello, err := lcdproc.Hello(hctx, o.Address)
	cancel()
	if err == nil {
		o.Rows, o.Cols = hello.Rows, hello.Cols
	} else {
		log.Info("LCDd is not answering yet; drawing at the profile's size until it does",
			"lcdd", o.Address, "rows", o.Rows, "cols", o.Cols, "err", err)
	}
	if d.Backlight != nil && !*d.Backlight {
		o.BacklightOff = true
	}
	return lcdproc.New(o), keys, nil
}

// FromLCDprocKeys turns the keys LCDd reports into keypad events, as if
// the mapped keypad key had been pressed (and held, for a "hold:" binding)
// and released, until ctx ends. Keys not in the map are ignored.
func FromLCDprocKeys(ctx context.Context, names <-chan string, keys map[string]input.Binding, out chan<- input.Event) {
	send := func(ev input.Event) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case name := <-names:
			b, ok := keys[name]
			if !ok || b.Key == 0 {
				continue
			}
			now := time.Now()
			ev := input.Event{Kind: input.KeyDown, Key: b.Key, Row: -1, Col: -1, Time: now}
			if !send(ev) {
				return
			}
			if b.Hold {
				ev.Kind = input.KeyRepeat
				if !send(ev) {
					return
				}
			}
			ev.Kind = input.KeyUp
			if !send(ev) {
				return
			}
		}
	}
}

// eventMerge forwards the events of several sources to one channel.
type eventMerge struct {
	in  []<-chan input.Event
	out chan input.Event
}

func mergeEvents(in []<-chan input.Event) *eventMerge {
	return &eventMerge{in: in, out: make(chan input.Event)}
}

// run forwards until ctx ends; a closed source is dropped.
func (m *eventMerge) run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, c := range m.in {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-c:
					if !ok {
						return
					}
					select {
					case m.out <- ev:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}
