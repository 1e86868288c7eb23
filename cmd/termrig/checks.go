package main

// The bring-up checks: serial-loopback, i2c-scan, lcd-test, gpio-loopback,
// keypad-test, link-test and selftest. Each command parses its flags,
// opens the hardware (or, with --sim, the simulated rig) and hands them to
// its check in termlink/testrig/checks, then prints the Result as text or
// JSON. Exit status 1 when the check failed.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"periph.io/x/conn/v3/i2c"

	"termlink/boards"
	"termlink/device"
	"termlink/device/input"
	"termlink/display"
	"termlink/testrig/checks"
	"termlink/testrig/checks/sim"
)

// checkOutput prints r and returns the exit status 1 when it failed (the
// failure is printed once, in r).
// simSerialQuiet is the silence that ends a serial pattern short on the
// simulated rig. Its line is a PTY and a goroutine: it goes quiet only
// when the machine is busy, never because bytes were lost, so it is given
// seconds, not a UART's 40 characters (a pattern ended short at load 30
// after 250 ms; a pattern that arrives whole still ends at once).
const simSerialQuiet = 5 * time.Second

func (a *app) checkOutput(r checks.Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else if err := r.WriteText(a.stdout); err != nil {
		return err
	}
	if !r.Pass {
		return exitFailed
	}
	return nil
}

// visited returns the names of the flags given on the command line.
func visited(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

const serialLoopbackSynopsis = `--port P [--baud B,...] [--bytes N] [--json]

Tests a serial port whose TX is wired to its own RX (a jumper): at each baud
rate it sends three patterns (counting, 0x00/0xFF, random), reads back what
arrives, and reports bytes sent, received and corrupted, throughput against
the line's maximum (baud/10 bytes per second for 8N1) and a verdict.
--sim runs it on a PTY looped back to itself.`

func (a *app) serialLoopback(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("serial-loopback", serialLoopbackSynopsis)
	port := fs.String("port", "", "serial port `P` with TX wired to RX (/dev/serial0, /dev/ttyUSB0)")
	bauds := fs.String("baud", "9600,115200", "baud rates `B,...` to test")
	var o checks.SerialOptions
	o.Bytes = checks.DefaultSerialBytes
	fs.Var(intFlag{&o.Bytes}, "bytes", "`N` bytes per pattern")
	fs.Uint64Var(&o.Seed, "seed", 1, "`seed` of the random pattern")
	useSim := fs.Bool("sim", false, "test a simulated loopback (a PTY) instead of a real port")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	var h hw
	var err error
	if o.Bauds, err = h.parseBauds(*bauds); err != nil {
		return usageError{err}
	}
	switch {
	case o.Bytes < 1 || o.Bytes > 1<<20:
		return usagef("--bytes must be 1 to 1048576, got %d", o.Bytes)
	case *port == "" && !*useSim:
		return usagef("--port is required (e.g. --port /dev/serial0), or --sim")
	case *port != "" && *useSim:
		return usagef("--port and --sim exclude each other")
	}
	if *useSim {
		rig, err := h.simRig(sim.Options{})
		if err != nil {
			return err
		}
		defer rig.Close()
		*port = rig.SerialPort
		o.Quiet = simSerialQuiet
	}
	return a.checkOutput(checks.SerialLoopback(ctx, *port, o), *asJSON)
}

const i2cScanSynopsis = `[--bus N] [--expect ADDR,...] [--json]

Probes every I2C address (0x08-0x77) with a one-byte read, which does not
change a PCF8574's outputs, and lists those that answer with the likely part:
0x20-0x27 a PCF8574 LCD backpack, 0x38-0x3F a PCF8574A backpack.
Fails when nothing answers, or when an address given with --expect does not.
--sim scans the emulated LCD backpack's bus.`

func (a *app) i2cScan(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("i2c-scan", i2cScanSynopsis)
	bus := fs.String("bus", "1", "I2C bus `N` (1 for /dev/i2c-1, or a periph bus name)")
	expect := fs.String("expect", "", "addresses `ADDR,...` that must answer (e.g. 0x27)")
	useSim := fs.Bool("sim", false, "scan the simulated bus (the LCD emulator at 0x27)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	var h hw
	var o checks.I2COptions
	if *expect != "" {
		for _, s := range strings.Split(*expect, ",") {
			addr, err := h.parseAddr(strings.TrimSpace(s))
			if err != nil {
				return usagef("--expect: %v", err)
			}
			o.Expect = append(o.Expect, addr)
		}
	}
	if *useSim {
		if visited(fs)["bus"] {
			return usagef("--bus and --sim exclude each other")
		}
		rig, err := h.simRig(sim.Options{})
		if err != nil {
			return err
		}
		defer rig.Close()
		o.Bus = "the simulated bus"
		return a.checkOutput(checks.I2CScan(ctx, rig.LCD, o), *asJSON)
	}
	b, name, err := h.openI2C(*bus)
	if err != nil {
		return a.checkOutput(h.openError("i2c-scan", err), *asJSON)
	}
	defer b.Close()
	o.Bus = name
	return a.checkOutput(checks.I2CScan(ctx, b, o), *asJSON)
}

const lcdTestSynopsis = `--board NAME | --board-file F | [--bus N] [--addr 0x27] [--size 16x2] [--rom A00] [--hold D] [--json]

Shows test patterns on an HD44780 character LCD with the real driver: every
pixel on, both pages of the character ROM, eight custom characters, a
blinking cursor moving over every cell, and full-screen redraws to measure
frames per second. I2C errors are counted; the driver re-initialises the
display after each, and the check fails only when it does not come back.
Look at the glass while it runs: --hold keeps each pattern up that long.
The LCD comes from the board profile (--board or --board-file) or from
the flags.
--sim (or --board sim) runs it on the LCD emulator and draws its glass.`

func (a *app) lcdTest(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("lcd-test", lcdTestSynopsis)
	var board boardFlags
	board.register(fs, "")
	bus := fs.String("bus", "1", "I2C bus `N`")
	addrS := fs.String("addr", "0x27", "backpack I2C `address`")
	size := fs.String("size", "16x2", "display size `COLSxROWS`")
	romS := fs.String("rom", "A00", "character `ROM`: A00 or A02")
	hold := time.Second
	fs.Var(durationFlag{&hold}, "hold", "keep each pattern on the glass for `D` (0 with --sim unless given)")
	frames := 40
	fs.Var(intFlag{&frames}, "frames", "full-screen frames `N` drawn to measure the frame rate")
	useSim := fs.Bool("sim", false, "run on the LCD emulator")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	set := visited(fs)
	var h hw
	if err := board.check(); err != nil {
		return err
	}
	if board.given() && !board.sim() && (set["bus"] || set["addr"] || set["size"] || set["rom"]) {
		return usagef("%s gives the LCD: --bus, --addr, --size and --rom go without it (except with --board sim)", board)
	}
	if frames < 1 {
		return usagef("--frames must be at least 1, got %d", frames)
	}
	if hold < 0 {
		return usagef("--hold must not be negative")
	}
	spec := lcdSpec{bus: *bus}
	var err error
	if spec.addr, err = h.parseAddr(*addrS); err != nil {
		return usagef("--addr: %v", err)
	}
	if spec.rows, spec.cols, err = h.parseSize(*size); err != nil {
		return usagef("--size: %v", err)
	}
	if spec.rom, err = display.ParseROM(*romS); err != nil {
		return usagef("--rom: %v", err)
	}
	o := checks.LCDOptions{Hold: hold, Frames: frames}

	if *useSim || board.sim() {
		if !set["hold"] {
			o.Hold = 0
		}
		rig, err := h.simRig(sim.Options{Rows: spec.rows, Cols: spec.cols, ROM: spec.rom, Addr: spec.addr})
		if err != nil {
			return err
		}
		defer rig.Close()
		o.Bus, o.Rows, o.Cols, o.ROM = "the simulated bus", rig.Rows, rig.Cols, rig.ROM
		o.Sleep, o.Now = rig.Clock.Sleep, rig.Clock.Now
		if !*asJSON {
			o.OnPattern = func(name string) { fmt.Fprintf(a.stdout, "%s:\n%s\n", name, rig.LCD.Render()) }
		}
		return a.checkOutput(checks.LCDTest(ctx, rig.LCD, rig.Addr, o), *asJSON)
	}
	if board.given() {
		p, err := board.load()
		if err != nil {
			return a.checkOutput(checks.Failed("lcd-test", err), *asJSON)
		}
		if spec, err = h.boardLCD(p); err != nil {
			return a.checkOutput(checks.Failed("lcd-test", err), *asJSON)
		}
	}
	return a.checkOutput(a.runLCD(ctx, h, spec, o), *asJSON)
}

// runLCD opens the LCD of spec and runs the patterns.
func (a *app) runLCD(ctx context.Context, h hw, spec lcdSpec, o checks.LCDOptions) checks.Result {
	o.Rows, o.Cols, o.ROM, o.Pins = spec.rows, spec.cols, spec.rom, spec.pins
	if spec.board != nil {
		dev, where, err := h.openGPIOLCD(ctx, spec)
		if err != nil {
			return h.openError("lcd-test", err)
		}
		return checks.LCDPatterns(ctx, dev, where, o)
	}
	b, name, err := h.openI2C(spec.bus)
	if err != nil {
		return h.openError("lcd-test", err)
	}
	defer b.Close()
	o.Bus = name
	return checks.LCDTest(ctx, b, spec.addr, o)
}

const gpioLoopbackSynopsis = `--out PIN --in PIN [--toggles N] [--json]

Tests two GPIO pins wired together: OUT drives, IN reads. It tells a wire
from no wire with IN's pull resistors, then toggles OUT and times each
change until IN reports the edge: edges seen and latency p50/p99.
Pins are periph names: GPIO17, GPIO27. --sim uses two simulated pins.`

func (a *app) gpioLoopback(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("gpio-loopback", gpioLoopbackSynopsis)
	outName := fs.String("out", "", "output `PIN` (GPIO17)")
	inName := fs.String("in", "", "input `PIN` wired to --out (GPIO27)")
	var o checks.GPIOOptions
	o.Toggles, o.Timeout = 200, 50*time.Millisecond
	fs.Var(intFlag{&o.Toggles}, "toggles", "level changes `N` to time")
	fs.Var(durationFlag{&o.Timeout}, "timeout", "longest wait `D` for one change to arrive")
	useSim := fs.Bool("sim", false, "test two simulated pins joined by a wire")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	switch {
	case o.Toggles < 1:
		return usagef("--toggles must be at least 1, got %d", o.Toggles)
	case o.Timeout <= 0:
		return usagef("--timeout must be positive")
	case *useSim && (*outName != "" || *inName != ""):
		return usagef("--sim and --out/--in exclude each other")
	case !*useSim && (*outName == "" || *inName == ""):
		return usagef("--out and --in are required (e.g. --out GPIO17 --in GPIO27), or --sim")
	case !*useSim && *outName == *inName:
		return usagef("--out and --in must be two different pins")
	}
	if *useSim {
		out, in := sim.NewWire("SIM_OUT", "SIM_IN")
		return a.checkOutput(checks.GPIOLoopback(ctx, out, in, o), *asJSON)
	}
	var h hw
	out, err := h.pin(*outName)
	if err != nil {
		return a.checkOutput(h.openError("gpio-loopback", err), *asJSON)
	}
	in, err := h.pin(*inName)
	if err != nil {
		return a.checkOutput(h.openError("gpio-loopback", err), *asJSON)
	}
	return a.checkOutput(checks.GPIOLoopback(ctx, out, in, o), *asJSON)
}

const keypadTestSynopsis = `--board NAME | --board-file F [--timeout D] [--stuck-after D] [--json]

For a person to press every key of the board's matrix keypad once. A table
of the keys seen so far is redrawn after every press; the test ends when
every key was seen, at --timeout, or on Ctrl-C. It fails on keys never seen
(naming a dead row or column), stuck keys, a column that reads low by itself,
and ghosting. --sim (or --board sim) runs the real scanner on a simulated
keypad whose keys a robot presses.`

func (a *app) keypadTest(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("keypad-test", keypadTestSynopsis)
	var board boardFlags
	board.register(fs, " with a keypad")
	timeout := 2 * time.Minute
	fs.Var(durationFlag{&timeout}, "timeout", "give up after `D`")
	stuckAfter := 5 * time.Second
	fs.Var(durationFlag{&stuckAfter}, "stuck-after", "a key held longer than `D` is reported stuck")
	useSim := fs.Bool("sim", false, "simulated keypad and presses")
	asJSON := fs.Bool("json", false, "print the result as JSON (the live table goes to stderr)")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	var h hw
	switch {
	case timeout <= 0 || stuckAfter <= 0:
		return usagef("--timeout and --stuck-after must be positive")
	case !board.given() && !*useSim:
		return usagef("--board is required (e.g. --board rpi-lcd2004-i2c, or --board-file F), or --sim")
	}
	if err := board.check(); err != nil {
		return err
	}
	live := a.stdout
	if *asJSON {
		live = a.stderr
	}
	o := checks.KeypadOptions{Timeout: timeout, Live: live, ANSI: h.isTerminal(live)}
	if *useSim || board.sim() {
		rig, err := h.simRig(sim.Options{})
		if err != nil {
			return err
		}
		defer rig.Close()
		kp, err := rig.NewKeypad(0)
		if err != nil {
			return err
		}
		o.Keymap = rig.Keymap
		return a.checkOutput(checks.KeypadTest(ctx, kp, o), *asJSON)
	}
	p, err := board.load()
	if err != nil {
		return a.checkOutput(checks.Failed("keypad-test", err), *asJSON)
	}
	kp, err := a.boardKeypad(ctx, p, stuckAfter, &o)
	if err != nil {
		return a.checkOutput(h.openError("keypad-test", err), *asJSON)
	}
	return a.checkOutput(checks.KeypadTest(ctx, kp, o), *asJSON)
}

// boardKeypad opens the keypad of a profile (only its pins) and fills in
// o's keymap and pin names.
func (a *app) boardKeypad(ctx context.Context, p *boards.Profile, stuckAfter time.Duration, o *checks.KeypadOptions) (*input.Keypad, error) {
	k := p.Keypad
	if k == nil {
		return nil, fmt.Errorf("board %s has no keypad", p.Name)
	}
	km, err := k.Layout()
	if err != nil {
		return nil, fmt.Errorf("board %s: %w", p.Name, err)
	}
	// A held key is one press here.
	kp, err := device.OpenKeypad(ctx, p, input.Opts{Timing: input.Timing{StuckAfter: stuckAfter, RepeatDelay: -1}})
	if err != nil {
		return nil, err
	}
	o.Keymap, o.RowPins, o.ColPins = km, k.Rows, k.Cols
	return kp, nil
}

const linkTestSynopsis = `--server URL [--token T] [--ca-file F] [--cert F --key F] [--pings N] [--json]

Connects to a termlink server's terminal channel as a device does, times N
ping round trips (p50/p99) and one message round trip through the channel's
agent, and explains failures in the server's own words: a refused token,
an untrusted certificate, a refused or missing client certificate (a
channel with mutual TLS: --cert and --key, as termd's), nothing listening,
a wrong channel. URL is ws://host:port, wss://host:port,
http(s)://host:port or host:port; the path /api/channels/ID/ws is added when
missing. --sim runs it against an in-process termserver.`

func (a *app) linkTest(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("link-test", linkTestSynopsis)
	var o checks.LinkOptions
	fs.StringVar(&o.Server, "server", "", "server `URL` (required)")
	fs.StringVar(&o.Channel, "channel", "terminal-dev", "channel `id` when the URL has no path")
	fs.StringVar(&o.Token, "token", "", "device `token`")
	fs.StringVar(&o.CAFile, "ca-file", "", "PEM `file` of CA certificates to trust for wss://")
	certFlags(fs, &o)
	fs.StringVar(&o.PeerID, "peer-id", "termrig-link-test", "connect as peer `id` (a peer id the channel's tokens allow)")
	o.Pings, o.Timeout = 20, 10*time.Second
	fs.Var(intFlag{&o.Pings}, "pings", "ping round trips `N` to time")
	fs.Var(durationFlag{&o.Timeout}, "timeout", "limit `D` for each step (dial, connect, a ping, the message)")
	fs.BoolVar(&o.NoEcho, "no-echo", false, "skip the message round trip (it runs the channel's agent)")
	useSim := fs.Bool("sim", false, "test against an in-process termserver with the echo agent")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	switch {
	case o.Pings < 1:
		return usagef("--pings must be at least 1, got %d", o.Pings)
	case o.Timeout <= 0:
		return usagef("--timeout must be positive")
	case o.Server == "" && !*useSim:
		return usagef("--server is required (e.g. --server ws://127.0.0.1:8080), or --sim")
	case o.Server != "" && *useSim:
		return usagef("--server and --sim exclude each other")
	case (o.CertFile == "") != (o.KeyFile == ""):
		return usagef("--cert and --key go together: give both")
	}
	if *useSim {
		rig, err := hw{}.simRig(sim.Options{Server: true})
		if err != nil {
			return err
		}
		defer rig.Close()
		o.Server = rig.ServerURL
	}
	return a.checkOutput(checks.LinkTest(ctx, o), *asJSON)
}

// certFlags are link-test's client certificate flags, named as termd's.
func certFlags(fs *flag.FlagSet, o *checks.LinkOptions) {
	fs.StringVar(&o.CertFile, "cert", "", "PEM `file` of a client certificate, for a channel with mutual TLS (with --key)")
	fs.StringVar(&o.KeyFile, "key", "", "PEM `file` of the client certificate's private key (mode 0600)")
}

const selftestSynopsis = `--board NAME | --board-file F | --sim [--interactive] [--serial-port P] [--gpio-out PIN --gpio-in PIN] [--server URL] [--json]

Runs every check that applies to the board: i2c-scan and lcd-test for an
I2C LCD (lcd-test for a GPIO LCD), keypad-test when the board has a keypad
and --interactive is given (it needs a person), serial-loopback when
--serial-port names a port with TX wired to RX, gpio-loopback when
--gpio-out and --gpio-in are wired together, link-test when --server is
given. Prints a table (PASS, FAIL, SKIP: it could run with what it asks
for, N/A: not on this board) and a verdict: PASS (exit status 0) only when
every check that applies ran and passed; FAIL (1) when one failed;
INCOMPLETE (3) when none failed but some were skipped.
--sim (or --board sim) runs every check on the simulated rig (LCD emulator,
PTY loopback, simulated pins and keypad, in-process termserver): it needs no
hardware and no person, for CI.`

// selftestFlags are selftest's options.
type selftestFlags struct {
	board                boardFlags
	serialPort, bauds    string
	gpioOut, gpioIn      string
	interactive, verbose bool
	link                 checks.LinkOptions
	hold, keypadTimeout  time.Duration
}

func (a *app) selftest(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("selftest", selftestSynopsis)
	var f selftestFlags
	f.board.register(fs, "")
	useSim := fs.Bool("sim", false, "run on the simulated rig (same as --board sim)")
	fs.BoolVar(&f.interactive, "interactive", false, "a person is here: run keypad-test, keep each LCD pattern up for --hold")
	fs.StringVar(&f.serialPort, "serial-port", "", "serial port `P` with TX wired to RX, for serial-loopback")
	fs.StringVar(&f.bauds, "baud", "9600,115200", "baud rates `B,...` for serial-loopback")
	fs.StringVar(&f.gpioOut, "gpio-out", "", "output `PIN` wired to --gpio-in, for gpio-loopback")
	fs.StringVar(&f.gpioIn, "gpio-in", "", "input `PIN` wired to --gpio-out")
	fs.StringVar(&f.link.Server, "server", "", "termserver `URL` for link-test (with --sim: an in-process server when not given)")
	fs.StringVar(&f.link.Token, "token", "", "device `token` for link-test")
	fs.StringVar(&f.link.CAFile, "ca-file", "", "PEM `file` of CA certificates for link-test over wss://")
	certFlags(fs, &f.link)
	f.hold, f.keypadTimeout = time.Second, 2*time.Minute
	fs.Var(durationFlag{&f.hold}, "hold", "with --interactive, keep each LCD pattern up for `D`")
	fs.Var(durationFlag{&f.keypadTimeout}, "keypad-timeout", "with --interactive, give the keypad test `D`")
	fs.BoolVar(&f.verbose, "v", false, "print every check's details, not only the failed ones'")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	var h hw
	switch {
	case *useSim && f.board.given() && !f.board.sim():
		return usagef("--sim and %s exclude each other", f.board)
	case !*useSim && !f.board.given():
		return usagef("--board is required (e.g. --board rpi-lcd2004-i2c, or --board-file F), or --sim")
	case (f.gpioOut == "") != (f.gpioIn == ""):
		return usagef("--gpio-out and --gpio-in go together")
	case (f.link.CertFile == "") != (f.link.KeyFile == ""):
		return usagef("--cert and --key go together: give both")
	case f.hold < 0 || f.keypadTimeout <= 0:
		return usagef("--hold must not be negative and --keypad-timeout must be positive")
	}
	if err := f.board.check(); err != nil {
		return err
	}
	bauds, err := h.parseBauds(f.bauds)
	if err != nil {
		return usageError{err}
	}

	var steps []checks.Step
	if *useSim || f.board.sim() {
		rig, err := h.simRig(sim.Options{Server: f.link.Server == ""})
		if err != nil {
			return err
		}
		defer rig.Close()
		steps = a.simSteps(rig, f, bauds)
	} else {
		p, err := f.board.load()
		if err != nil {
			var rep checks.Report
			rep.Add(checks.Failed("selftest", err))
			return a.reportOutput(rep, *asJSON, f.verbose)
		}
		var cleanup func()
		steps, cleanup = a.boardSteps(h, p, f, bauds, *asJSON)
		defer cleanup()
	}
	rep := checks.Selftest(ctx, steps, nil)
	return a.reportOutput(rep, *asJSON, f.verbose)
}

// reportOutput prints a selftest report and returns the exit status it
// calls for: 1 when a check failed, 3 when nothing failed but checks were
// skipped for lack of what they need (INCOMPLETE: not a failure, and not a
// pass a script may take for "the board works").
func (a *app) reportOutput(rep checks.Report, asJSON, verbose bool) error {
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := rep.WriteText(a.stdout, verbose); err != nil {
		return err
	}
	switch rep.Verdict {
	case checks.VerdictPass:
		return nil
	case checks.VerdictIncomplete:
		return exitIncomplete
	}
	return exitFailed
}

// simSteps are every check on the simulated rig.
func (a *app) simSteps(rig *sim.Rig, f selftestFlags, bauds []int) []checks.Step {
	link := f.link
	if link.Server == "" {
		link.Server = rig.ServerURL
	}
	return []checks.Step{
		{Name: "i2c-scan", Run: func(ctx context.Context) checks.Result {
			return checks.I2CScan(ctx, rig.LCD, checks.I2COptions{Bus: "the simulated bus", Expect: []uint16{rig.Addr}})
		}},
		{Name: "lcd-test", Run: func(ctx context.Context) checks.Result {
			return checks.LCDTest(ctx, rig.LCD, rig.Addr, checks.LCDOptions{Bus: "the simulated bus", Rows: rig.Rows, Cols: rig.Cols,
				ROM: rig.ROM, Sleep: rig.Clock.Sleep, Now: rig.Clock.Now})
		}},
		{Name: "serial-loopback", Run: func(ctx context.Context) checks.Result {
			return checks.SerialLoopback(ctx, rig.SerialPort, checks.SerialOptions{Bauds: bauds, Quiet: simSerialQuiet})
		}},
		{Name: "gpio-loopback", Run: func(ctx context.Context) checks.Result {
			return checks.GPIOLoopback(ctx, rig.GPIOOut, rig.GPIOIn, checks.GPIOOptions{})
		}},
		{Name: "keypad-test", Run: func(ctx context.Context) checks.Result {
			kp, err := rig.NewKeypad(0)
			if err != nil {
				return checks.Failed("keypad-test", err)
			}
			return checks.KeypadTest(ctx, kp, checks.KeypadOptions{Keymap: rig.Keymap, Timeout: 30 * time.Second})
		}},
		{Name: "link-test", Run: func(ctx context.Context) checks.Result { return checks.LinkTest(ctx, link) }},
	}
}

// boardSteps are the checks that apply to a board; each opens what it
// needs when it runs, so one device that does not open fails only its own
// checks. cleanup closes what was opened.
func (a *app) boardSteps(h hw, p *boards.Profile, f selftestFlags, bauds []int, asJSON bool) ([]checks.Step, func()) {
	var closers []func() error
	cleanup := func() {
		for _, c := range closers {
			c()
		}
	}
	lcd, lcdErr := h.boardLCD(p)
	hold := time.Duration(0)
	if f.interactive {
		hold = f.hold
	}

	// The I2C bus, opened once for i2c-scan and lcd-test.
	var bus i2c.BusCloser
	var busName string
	var busErr error
	busOpened := false
	openBus := func() (i2c.BusCloser, string, error) {
		if !busOpened {
			busOpened = true
			bus, busName, busErr = h.openI2C(lcd.bus)
			if busErr == nil {
				closers = append(closers, bus.Close)
			}
		}
		return bus, busName, busErr
	}

	var steps []checks.Step
	switch {
	case lcdErr != nil && p.Display.Kind != boards.HD44780I2C && p.Display.Kind != boards.HD44780GPIO:
		steps = append(steps, checks.Step{Name: "i2c-scan", NotApplicable: "the board has no I2C LCD"},
			checks.Step{Name: "lcd-test", NotApplicable: lcdErr.Error()})
	case lcdErr != nil:
		steps = append(steps, checks.Step{Name: "lcd-test", Run: func(context.Context) checks.Result {
			return checks.Failed("lcd-test", lcdErr)
		}})
	case lcd.board != nil:
		steps = append(steps, checks.Step{Name: "i2c-scan", NotApplicable: "the LCD is on GPIO lines, not I2C"},
			checks.Step{Name: "lcd-test", Run: func(ctx context.Context) checks.Result {
				return a.runLCD(ctx, h, lcd, checks.LCDOptions{Hold: hold})
			}})
	default:
		steps = append(steps,
			checks.Step{Name: "i2c-scan", Run: func(ctx context.Context) checks.Result {
				b, name, err := openBus()
				if err != nil {
					return h.openError("i2c-scan", err)
				}
				return checks.I2CScan(ctx, b, checks.I2COptions{Bus: name, Expect: []uint16{lcd.addr}})
			}},
			checks.Step{Name: "lcd-test", Run: func(ctx context.Context) checks.Result {
				b, name, err := openBus()
				if err != nil {
					return h.openError("lcd-test", err)
				}
				return checks.LCDTest(ctx, b, lcd.addr, checks.LCDOptions{Bus: name, Rows: lcd.rows, Cols: lcd.cols,
					ROM: lcd.rom, Pins: lcd.pins, Hold: hold})
			}})
	}

	if f.serialPort != "" {
		steps = append(steps, checks.Step{Name: "serial-loopback", Run: func(ctx context.Context) checks.Result {
			return checks.SerialLoopback(ctx, f.serialPort, checks.SerialOptions{Bauds: bauds})
		}})
	} else {
		steps = append(steps, checks.Step{Name: "serial-loopback", Skip: "no loopback port: pass --serial-port P with TX wired to RX"})
	}

	if f.gpioOut != "" {
		steps = append(steps, checks.Step{Name: "gpio-loopback", Run: func(ctx context.Context) checks.Result {
			out, err := h.pin(f.gpioOut)
			if err != nil {
				return h.openError("gpio-loopback", err)
			}
			in, err := h.pin(f.gpioIn)
			if err != nil {
				return h.openError("gpio-loopback", err)
			}
			return checks.GPIOLoopback(ctx, out, in, checks.GPIOOptions{})
		}})
	} else {
		steps = append(steps, checks.Step{Name: "gpio-loopback", Skip: "no loopback pins: pass --gpio-out and --gpio-in wired together"})
	}

	switch {
	case p.Keypad == nil:
		steps = append(steps, checks.Step{Name: "keypad-test", NotApplicable: "the board has no keypad"})
	case !f.interactive:
		steps = append(steps, checks.Step{Name: "keypad-test", Skip: "needs a person to press the keys: run with --interactive"})
	default:
		steps = append(steps, checks.Step{Name: "keypad-test", Run: func(ctx context.Context) checks.Result {
			live := a.stdout
			if asJSON {
				live = a.stderr
			}
			o := checks.KeypadOptions{Timeout: f.keypadTimeout, Live: live, ANSI: h.isTerminal(live)}
			kp, err := a.boardKeypad(ctx, p, 5*time.Second, &o)
			if err != nil {
				return h.openError("keypad-test", err)
			}
			return checks.KeypadTest(ctx, kp, o)
		}})
	}

	if f.link.Server != "" {
		steps = append(steps, checks.Step{Name: "link-test", Run: func(ctx context.Context) checks.Result {
			return checks.LinkTest(ctx, f.link)
		}})
	} else {
		steps = append(steps, checks.Step{Name: "link-test", Skip: "no --server given"})
	}
	return steps, cleanup
}
