// Package sim is the simulated bring-up rig: stand-ins for a board's
// hardware that the checks of termlink/testrig/checks run against when
// there is no board (`termrig selftest --sim`, CI):
//
//   - the LCD: the HD44780+PCF8574 emulator (termlink/testrig/lcdemu) as the
//     I²C bus, on a fake clock that advances by the bus's wire time, so the
//     frame rate measured is the one a 100 kHz bus allows;
//   - the serial loopback: a PTY whose far end echoes every byte, as a
//     jumper from TX to RX does;
//   - the GPIO loopback: two fake pins joined by a wire;
//   - the keypad: the real matrix scanner (termlink/device/input) on a fake
//     diode-less matrix, with a robot that presses every key once;
//   - the server: the real termserver, in-process on a loopback port, with
//     the built-in echo agent.
package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/creack/pty"
	"periph.io/x/conn/v3/gpio"

	"termlink/device/input"
	"termlink/display"
	"termlink/server"
	"termlink/server/config"
	"termlink/testrig/fakepin"
	"termlink/testrig/lcdemu"
)

// Options configure a Rig. The zero value is a 20x4 A00 LCD at 0x27, a 4x4
// keypad and no server.
type Options struct {
	Rows, Cols int         // LCD size; 0 means 4 x 20
	ROM        display.ROM // LCD character ROM
	Addr       uint16      // backpack address; 0 means 0x27
	// Keymap is the keypad; nil means input.Keymap4x4().
	Keymap input.Keymap
	// Server starts an in-process termserver for link-test.
	Server bool
	// Logger gets the server's and the keypad's logs; nil discards them.
	Logger *slog.Logger
}

// Rig is a running simulated rig. Close it when done.
type Rig struct {
	// LCD is the emulated I²C bus with the LCD backpack at Addr; Clock is
	// its fake clock, to give the driver (hd44780.Opts Sleep and Now).
	LCD        *lcdemu.Bus
	Clock      *lcdemu.Clock
	Addr       uint16
	Rows, Cols int
	ROM        display.ROM

	// SerialPort is the path of a PTY looped back to itself.
	SerialPort string

	// GPIOOut and GPIOIn are joined by a wire.
	GPIOOut gpio.PinOut
	GPIOIn  gpio.PinIn

	// Keymap and Matrix are the keypad; NewKeypad returns a scanner with a
	// robot pressing every key.
	Keymap input.Keymap
	Matrix *fakepin.Matrix

	// ServerURL is the in-process termserver ("ws://127.0.0.1:port"), ""
	// without Options.Server.
	ServerURL string

	log     *slog.Logger
	mu      sync.Mutex
	closers []func() error
}

// New starts a simulated rig.
func New(o Options) (_ *Rig, err error) {
	if o.Rows == 0 && o.Cols == 0 {
		o.Rows, o.Cols = 4, 20
	}
	if o.Addr == 0 {
		o.Addr = 0x27
	}
	if o.Keymap == nil {
		o.Keymap = input.Keymap4x4()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Rig{Addr: o.Addr, Rows: o.Rows, Cols: o.Cols, ROM: o.ROM, Keymap: o.Keymap, log: o.Logger, Clock: &lcdemu.Clock{}}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	r.LCD, err = lcdemu.New(&lcdemu.Opts{Addr: o.Addr, Rows: o.Rows, Cols: o.Cols, ROM: o.ROM, Clock: r.Clock, Timing: true})
	if err != nil {
		return nil, fmt.Errorf("sim: LCD emulator: %w", err)
	}
	if r.SerialPort, err = r.loopbackPTY(); err != nil {
		return nil, fmt.Errorf("sim: serial loopback: %w", err)
	}
	r.GPIOOut, r.GPIOIn = NewWire("SIM_OUT", "SIM_IN")
	rows, cols := o.Keymap.Size()
	r.Matrix = fakepin.NewMatrix(rows, cols, "SIM_")
	if o.Server {
		if r.ServerURL, err = r.startServer(); err != nil {
			return nil, fmt.Errorf("sim: termserver: %w", err)
		}
	}
	return r, nil
}

func (r *Rig) onClose(f func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closers = append(r.closers, f)
}

// Close stops everything the rig started, last started first.
func (r *Rig) Close() error {
	r.mu.Lock()
	closers := r.closers
	r.closers = nil
	r.mu.Unlock()
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		errs = append(errs, closers[i]())
	}
	return errors.Join(errs...)
}

// loopbackPTY opens a PTY and echoes what arrives on its master side back:
// the slave is a serial port with TX jumpered to RX.
func (r *Rig) loopbackPTY() (string, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return "", err
	}
	// Raw mode: no echo, no line editing, every byte as it is. The check
	// sets raw mode too when it opens the port; until then the line
	// discipline must not answer on its own.
	makeRaw(tty)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				if _, werr := master.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	r.onClose(func() error {
		err := errors.Join(master.Close(), tty.Close())
		select {
		case <-done:
		case <-time.After(time.Second):
		}
		return err
	})
	return tty.Name(), nil
}

func (r *Rig) startServer() (string, error) {
	dir, err := os.MkdirTemp("", "termrig-sim-")
	if err != nil {
		return "", err
	}
	cfg := config.Default()
	cfg.Workspace = dir
	s, err := server.New(cfg, server.Options{Logger: r.log})
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, 2*time.Second) }()
	r.onClose(func() error {
		stop()
		err := <-served
		return errors.Join(err, os.RemoveAll(dir))
	})
	return "ws://" + ln.Addr().String(), nil
}

// NewKeypad returns the real keypad scanner on the simulated matrix,
// with a robot that presses every key, row by row, while the scanner
// runs (round after round, so a missed press is made again): a KeySource
// for checks.KeypadTest. hold is how long
// each key stays down; 0 means 30ms.
func (r *Rig) NewKeypad(hold time.Duration) (*Keypad, error) {
	if hold <= 0 {
		hold = 30 * time.Millisecond
	}
	kp, err := input.New(r.Matrix.Rows(), r.Matrix.Cols(), input.Opts{
		Keymap:       r.Keymap,
		Timing:       input.Timing{Debounce: 5 * time.Millisecond, RepeatDelay: -1, StuckAfter: 2 * time.Second},
		ScanInterval: time.Millisecond, StuckPoll: 20 * time.Millisecond, EdgeTimeout: 50 * time.Millisecond,
		Logger: r.log,
	})
	if err != nil {
		return nil, err
	}
	return &Keypad{Keypad: kp, m: r.Matrix, km: r.Keymap, hold: hold}, nil
}

// Keypad is the scanner with its robot.
type Keypad struct {
	*input.Keypad
	m    *fakepin.Matrix
	km   input.Keymap
	hold time.Duration
}

// Run runs the scanner and the robot until ctx ends.
func (k *Keypad) Run(ctx context.Context) error {
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	robot := make(chan struct{})
	go func() {
		defer close(robot)
		k.pressAll(rctx)
	}()
	err := k.Keypad.Run(ctx)
	stop()
	<-robot
	return err
}

func (k *Keypad) pressAll(ctx context.Context) {
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	if !sleep(20 * time.Millisecond) {
		return
	}
	// Round after round until the scanner stops: a press the scanner
	// missed (a loaded machine may not scan within the debounce time) is
	// pressed again in the next round, as a person would.
	for {
		for r, row := range k.km {
			for c := range row {
				k.m.Press(r, c)
				ok := sleep(k.hold)
				k.m.Release(r, c)
				if !ok || !sleep(k.hold) {
					return
				}
			}
		}
	}
}

// NewWire returns an output pin and an input pin joined by a wire: the
// input reads what the output drives and reports its edges.
func NewWire(outName, inName string) (gpio.PinOut, gpio.PinIn) {
	w := fakepin.NewWire(outName, inName)
	return w.Out(), w.In()
}
