package device

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"termlink/device/input"
	"termlink/display/console"
	"termlink/testrig/lcdemu"
)

// emuGlass draws the emulated HD44780's glass in this terminal (a board
// of kind hd44780-emu): a box with the LCD's rows, redrawn when they or
// the backlight change (a dark glass is dim), and the keys under it.
type emuGlass struct {
	bus  *lcdemu.Bus
	out  io.Writer
	name string

	mu   sync.Mutex
	last string // what was drawn last
}

// emuPoll is how often the glass is looked at for a change.
const emuPoll = 40 * time.Millisecond

func newEmuGlass(bus *lcdemu.Bus, out io.Writer, name string) *emuGlass {
	return &emuGlass{bus: bus, out: out, name: name}
}

// run draws the glass whenever it changed until ctx ends.
func (g *emuGlass) run(ctx context.Context) error {
	_, _ = io.WriteString(g.out, "\x1b[?25l\x1b[H\x1b[2J") // hide the cursor, clear
	t := time.NewTicker(emuPoll)
	defer t.Stop()
	for {
		g.draw()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil
		}
	}
}

// emuKeysLegend explains the keyboard as a keypad.
var emuKeysLegend = []string{
	"Keys: 2-9 multi-tap letters, 0 space, 1 punctuation, * case,",
	"# or Enter send, D or Backspace delete, A/B or Up/Down page;",
	"Ctrl-C quits. Status, right of the last row: ok online, .. connecting,",
	"seconds to the next try, -- offline; : waiting; + more below.",
}

func (g *emuGlass) draw() {
	lines := g.bus.Text()
	light := g.bus.State().Backlight
	key := fmt.Sprint(light, lines)
	g.mu.Lock()
	defer g.mu.Unlock()
	if key == g.last {
		return
	}
	g.last = key
	width := 0
	if len(lines) > 0 {
		width = utf8.RuneCountInString(lines[0])
	}
	state := "on"
	if !light {
		state = "off"
	}
	var b strings.Builder
	b.WriteString("\x1b[H")
	fmt.Fprintf(&b, " termd, board %s: %dx%d LCD (HD44780 emulator); backlight %s\x1b[K\r\n", g.name, width, len(lines), state)
	b.WriteString(" ┌" + strings.Repeat("─", width) + "┐\x1b[K\r\n")
	for _, l := range lines {
		if light {
			b.WriteString(" │" + l + "│\x1b[K\r\n")
		} else {
			b.WriteString(" │\x1b[2m" + l + "\x1b[22m│\x1b[K\r\n")
		}
	}
	b.WriteString(" └" + strings.Repeat("─", width) + "┘\x1b[K\r\n")
	for _, l := range emuKeysLegend {
		b.WriteString(" " + l + "\x1b[K\r\n")
	}
	b.WriteString("\x1b[J")
	_, _ = io.WriteString(g.out, b.String())
}

// close draws the last glass (termd's last screen, "offline: stopped")
// and gives the terminal its cursor back.
func (g *emuGlass) close() error {
	g.draw()
	_, err := io.WriteString(g.out, "\x1b[?25h")
	return err
}

var errEmuQuit = errors.New("quit")

// emuKeys turns this terminal's keyboard into the presses of a 4x4
// keypad on out (0-9, A-D, * and #; Enter is #, Backspace D, Up and Down
// A and B) until ctx ends; Ctrl-C or Ctrl-D quits (InputQuit on inputs).
func emuKeys(ctx context.Context, r io.Reader, out chan<- input.Event, inputs chan<- Input) {
	press := func(key rune) error {
		now := time.Now()
		for _, kind := range []input.Kind{input.KeyDown, input.KeyUp} {
			select {
			case out <- input.Event{Kind: kind, Key: key, Row: -1, Col: -1, Time: now}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	_ = console.ReadKeys(ctx, r, func(keys []console.Key) error {
		for _, k := range keys {
			var err error
			switch k.Kind {
			case console.KeyInterrupt, console.KeyEOF:
				select {
				case inputs <- Input{Kind: InputQuit}:
				case <-ctx.Done():
				}
				return errEmuQuit
			case console.KeyUp, console.KeyPageUp:
				err = press('A')
			case console.KeyDown, console.KeyPageDown:
				err = press('B')
			case console.KeyEnter:
				err = press('#')
			case console.KeyBackspace:
				err = press('D')
			case console.KeyRune:
				key := k.Rune
				if key >= 'a' && key <= 'd' {
					key -= 'a' - 'A'
				}
				if strings.ContainsRune("0123456789*#ABCD", key) {
					err = press(key)
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}
