// Package lcdproc draws on any display LCDproc's server, LCDd, drives
// (Matrix Orbital and CrystalFontz serial LCDs, VFDs, USB LCDs, HD44780s on
// many connections, or a curses window), as an LCDd client.
//
// Dev speaks LCDd's text protocol over TCP (default 127.0.0.1:13666): hello
// (the display's size comes from LCDd's answer), client_set -name, one
// screen (screen_add, screen_set with priority, backlight and no heartbeat),
// one string widget per row (widget_add ... string, widget_set with 1-based
// coordinates and the text quoted and escaped), and client_add_key for the
// keys it wants. Draw keeps the frame termd wants shown and sends
// widget_set only for the rows that changed. One reader handles what LCDd
// sends at any time (success, huh?, listen, ignore, key, noop complete,
// bye); keys arrive on Keys. Every write has a deadline.
//
// LCDd restarting is a lost link: Run reconnects with a jittered
// exponential backoff that never gives up and redraws everything on the new
// connection. A noop every PingInterval keeps a silent, hung LCDd from
// holding the display.
//
// Protocol: LCDproc Developer's Guide, "Client/Server protocol"
// (https://lcdproc.sourceforge.net/docs/lcdproc-0-5-5-dev.html), and LCDd's
// sources: server/parse.c (quoting), server/commands/*.c (commands and their
// answers), server/input.c (key reports).
package lcdproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"termlink/display"
)

// DefaultAddress is where LCDd listens by default.
const DefaultAddress = "127.0.0.1:13666"

// screenID is the id of termd's screen on LCDd.
const screenID = "termd"

// Opts configures a Dev. The zero value works.
type Opts struct {
	// Address is LCDd's host:port; default DefaultAddress.
	Address string
	// Name is the client name LCDd shows in its menus; default "termd".
	Name string
	// Rows and Cols are the size assumed until LCDd's hello answer says
	// otherwise; default 4 x 20.
	Rows, Cols int
	// Keys are the LCDd key names to reserve ("Up", "Enter", "1"). They
	// are reserved exclusively, so that they reach termd whichever screen
	// LCDd shows; SharedKeys reserves them shared instead (LCDd then
	// reports them only while termd's screen is shown).
	Keys       []string
	SharedKeys bool
	// Priority is the screen's priority: "foreground" by default, or one
	// of Priorities.
	Priority string
	// BacklightOff starts with the backlight off.
	BacklightOff bool
	// WriteTimeout bounds each write; default 5s. HandshakeTimeout bounds
	// dialing and the hello exchange; default 5s.
	WriteTimeout, HandshakeTimeout time.Duration
	// PingInterval is how often a noop is sent; a connection silent for
	// two intervals is dropped. Default 30s.
	PingInterval time.Duration
	// MinRetry and MaxRetry bound the reconnect backoff; default 250ms
	// and 30s.
	MinRetry, MaxRetry time.Duration
	// ComingFor is how long the first connection may take (LCDd starting
	// beside termd) before its failures are warned about: until then they
	// are logged at DEBUG, then one WARN says LCDd is not answering, and
	// the tries go on quietly until it does. Default DefaultComingFor.
	ComingFor time.Duration
	Logger    *slog.Logger
}

// DefaultComingFor is Opts.ComingFor's default.
const DefaultComingFor = 10 * time.Second

// Stats counts what went over the socket.
type Stats struct {
	Connects    int   // handshakes completed
	BytesOut    int64 // bytes written to LCDd
	RowWrites   int   // widget_set commands sent
	Refused     int   // huh? answers
	KeysIn      int   // key reports received
	KeysDropped int   // key reports dropped because Keys was not read
}

// ErrNotConnected is returned by Draw while LCDd is away; the frame is
// kept and drawn once it is back.
var ErrNotConnected = errors.New("lcdproc: not connected to LCDd")

// Dev is a display on LCDd. Create it with New and start Run.
type Dev struct {
	o    Opts
	log  *slog.Logger
	keys chan string

	mu        sync.Mutex
	rows      int
	cols      int
	frame     *display.Frame // what termd wants shown
	conn      net.Conn       // nil while not connected
	shown     []*string      // per row what LCDd has; nil: must be sent
	backlight bool
	visible   bool // LCDd shows termd's screen ("listen")
	stats     Stats
	pong      chan struct{} // a noop complete arrived
}

// New returns a Dev that is not connected yet; Run connects it.
func New(o Opts) *Dev {
	if o.Address == "" {
		o.Address = DefaultAddress
	}
	if o.Name == "" {
		o.Name = "termd"
	}
	if o.Rows <= 0 || o.Cols <= 0 {
		o.Rows, o.Cols = 4, 20
	}
	if o.Priority == "" {
		o.Priority = "foreground"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.WriteTimeout, 5*time.Second)
	def(&o.HandshakeTimeout, 5*time.Second)
	def(&o.PingInterval, 30*time.Second)
	def(&o.MinRetry, 250*time.Millisecond)
	def(&o.MaxRetry, 30*time.Second)
	def(&o.ComingFor, DefaultComingFor)
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Dev{o: o, log: log.With("lcdd", o.Address), keys: make(chan string, 32),
		rows: o.Rows, cols: o.Cols, frame: display.NewFrame(o.Rows, o.Cols),
		backlight: !o.BacklightOff, pong: make(chan struct{}, 1)}
}

// Keys delivers the names of the reserved keys pressed on LCDd's display.
// A key that arrives while the channel is full is dropped (and counted).
func (d *Dev) Keys() <-chan string { return d.keys }

// Size returns the display's size: LCDd's, once it has answered hello.
func (d *Dev) Size() (rows, cols int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rows, d.cols
}

// Shows implements display.Charset: printable ASCII, which every LCDd
// driver draws as itself.
func (d *Dev) Shows(r rune) bool { return r >= 0x20 && r <= 0x7e }

// Connected reports whether LCDd is connected now.
func (d *Dev) Connected() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conn != nil
}

// Visible reports whether LCDd shows termd's screen now (its last
// listen/ignore).
func (d *Dev) Visible() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.visible
}

// Stats returns the counters.
func (d *Dev) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Frame returns a copy of the frame termd wants shown.
func (d *Dev) Frame() *display.Frame {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.frame.Clone()
}

// Draw implements display.Screen: it keeps f (clipped or padded to the
// display) and sends the rows that differ from what LCDd has. While LCDd is
// away it returns an error wrapping ErrNotConnected; the frame is drawn
// when it is back.
func (d *Dev) Draw(ctx context.Context, f *display.Frame) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.frame.CopyFrom(f)
	return d.flushLocked(ctx)
}

// SetBacklight switches the backlight of termd's screen.
func (d *Dev) SetBacklight(ctx context.Context, on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.backlight = on
	if d.conn == nil {
		return fmt.Errorf("%w at %s", ErrNotConnected, d.o.Address)
	}
	return d.writeLocked(ctx, fmt.Sprintf("screen_set %s -backlight %s\n", screenID, onOff(on)))
}

// Priorities LCDd knows for a screen (server/screen.c), lowest first.
var Priorities = []string{"hidden", "background", "info", "foreground", "alert", "input"}

// SetPriority changes the priority of termd's screen: "alert" puts it in
// front of every other client's screens (a notice), "foreground" is the
// usual, "background" lets LCDd rotate other screens in.
func (d *Dev) SetPriority(ctx context.Context, priority string) error {
	if !slices.Contains(Priorities, priority) {
		return fmt.Errorf("lcdproc: screen priority %q: want one of %s", priority, strings.Join(Priorities, ", "))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.o.Priority = priority
	if d.conn == nil {
		return fmt.Errorf("%w at %s", ErrNotConnected, d.o.Address)
	}
	return d.writeLocked(ctx, fmt.Sprintf("screen_set %s -priority %s\n", screenID, priority))
}

// Sync waits until LCDd has processed everything sent before it (a noop
// and its answer), or ctx ends.
func (d *Dev) Sync(ctx context.Context) error {
	d.mu.Lock()
	select { // a stale pong must not count
	case <-d.pong:
	default:
	}
	err := d.writeLocked(ctx, "noop\n")
	d.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-d.pong:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// flushLocked sends widget_set for every row LCDd does not have yet.
func (d *Dev) flushLocked(ctx context.Context) error {
	if d.conn == nil {
		return fmt.Errorf("%w at %s", ErrNotConnected, d.o.Address)
	}
	var b strings.Builder
	var sent []int
	for r := range d.rows {
		line := strings.TrimRight(d.frame.Line(r), " ")
		if d.shown[r] == nil || *d.shown[r] != line {
			fmt.Fprintf(&b, "widget_set %s r%d 1 %d %s\n", screenID, r+1, r+1, Quote(line))
			sent = append(sent, r)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	if err := d.writeLocked(ctx, b.String()); err != nil {
		return err
	}
	for _, r := range sent {
		line := strings.TrimRight(d.frame.Line(r), " ")
		d.shown[r] = &line
	}
	d.stats.RowWrites += len(sent)
	return nil
}

// writeLocked writes s with a deadline (WriteTimeout, or ctx's if sooner).
// A failed write drops the connection; Run reconnects.
func (d *Dev) writeLocked(ctx context.Context, s string) error {
	if d.conn == nil {
		return fmt.Errorf("%w at %s", ErrNotConnected, d.o.Address)
	}
	deadline := time.Now().Add(d.o.WriteTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if err := d.conn.SetWriteDeadline(deadline); err != nil {
		return d.dropLocked(fmt.Errorf("lcdproc: setting the write deadline: %w", err))
	}
	n, err := d.conn.Write([]byte(s))
	d.stats.BytesOut += int64(n)
	if err != nil {
		return d.dropLocked(fmt.Errorf("lcdproc: writing to LCDd at %s: %w", d.o.Address, err))
	}
	return nil
}

// dropLocked closes the connection after an error; the reader sees it
// closed and Run reconnects.
func (d *Dev) dropLocked(err error) error {
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
	return err
}

// Run connects to LCDd and keeps the connection, reconnecting with backoff
// whenever it is lost, until ctx ends. It returns ctx.Err(). A first
// connection still coming is not warned about before Opts.ComingFor.
func (d *Dev) Run(ctx context.Context) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = d.o.MinRetry
	bo.MaxInterval = d.o.MaxRetry
	bo.MaxElapsedTime = 0
	bo.Reset()
	began := time.Now()
	warned := false // that the first connection is not coming
	for {
		start := time.Now()
		err := d.session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(start) > 2*d.o.MaxRetry {
			bo.Reset() // it was a stable session
		}
		wait := bo.NextBackOff()
		d.mu.Lock()
		ever := d.stats.Connects > 0
		d.mu.Unlock()
		switch {
		case ever:
			d.log.Warn("lcdproc: LCDd connection lost; retrying", "err", err, "retry_in", wait.Round(time.Millisecond))
		case !warned && time.Since(began) >= d.o.ComingFor:
			warned = true
			d.log.Warn("lcdproc: LCDd is not answering; trying on quietly until it does", "err", err,
				"since", time.Since(began).Round(time.Second), "retry_in", wait.Round(time.Millisecond))
		default:
			d.log.Debug("lcdproc: LCDd not connected yet; retrying", "err", err, "retry_in", wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// session dials, shakes hands, redraws and reads until the connection
// fails or ctx ends.
func (d *Dev) session(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, d.o.HandshakeTimeout)
	defer cancel()
	var dialer net.Dialer
	conn, err := dialer.DialContext(dctx, "tcp", d.o.Address)
	if err != nil {
		return fmt.Errorf("lcdproc: dialing LCDd: %w", err)
	}
	// Closing the connection is how a blocked read is ended.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()

	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 0, 512), maxLine+1)
	hello, err := d.handshake(conn, sc)
	if err != nil {
		return err
	}
	if err := d.setup(ctx, conn, hello); err != nil {
		return err
	}
	d.log.Info("lcdproc: connected to LCDd", "server", hello.Server, "version", hello.Version,
		"protocol", hello.Protocol, "cols", hello.Cols, "rows", hello.Rows)
	defer func() {
		d.mu.Lock()
		if d.conn == conn {
			d.conn = nil
		}
		d.visible = false
		d.mu.Unlock()
	}()

	pingDone := make(chan struct{})
	defer close(pingDone)
	go d.ping(conn, pingDone)
	return d.read(conn, sc)
}

// Hello connects to LCDd at address, says hello and returns its answer
// (the display's size and LCDd's version), then disconnects. termd uses it
// at start to draw its first frames at the right size.
func Hello(ctx context.Context, address string) (Response, error) {
	if address == "" {
		address = DefaultAddress
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", address)
	if err != nil {
		return Response{}, fmt.Errorf("lcdproc: dialing LCDd: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	d := &Dev{o: Opts{HandshakeTimeout: 5 * time.Second}, log: slog.New(slog.DiscardHandler)}
	if dl, ok := ctx.Deadline(); ok {
		d.o.HandshakeTimeout = time.Until(dl)
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 0, 512), maxLine+1)
	r, err := d.handshake(conn, sc)
	if err == nil {
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		conn.Write([]byte("bye\n"))
	}
	return r, err
}

func (d *Dev) handshake(conn net.Conn, sc *bufio.Scanner) (Response, error) {
	deadline := time.Now().Add(d.o.HandshakeTimeout)
	conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		return Response{}, fmt.Errorf("lcdproc: sending hello: %w", err)
	}
	for sc.Scan() {
		r, err := ParseResponse(sc.Text())
		if err != nil {
			d.log.Warn("lcdproc: during hello", "err", err)
			continue
		}
		switch r.Kind {
		case Connect:
			conn.SetDeadline(time.Time{})
			return r, nil
		case Huh:
			return Response{}, fmt.Errorf("lcdproc: LCDd refused hello: %s", r.Text)
		}
	}
	err := sc.Err()
	if err == nil {
		err = errors.New("connection closed")
	}
	return Response{}, fmt.Errorf("lcdproc: waiting for LCDd's answer to hello: %w", err)
}

// setup makes the screen and its widgets on a new connection and draws
// the whole frame.
func (d *Dev) setup(ctx context.Context, conn net.Conn, hello Response) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if hello.Rows != d.rows || hello.Cols != d.cols {
		f := display.NewFrame(hello.Rows, hello.Cols)
		f.CopyFrom(d.frame)
		d.frame, d.rows, d.cols = f, hello.Rows, hello.Cols
	}
	d.conn = conn
	d.shown = make([]*string, d.rows)
	d.stats.Connects++
	var b strings.Builder
	fmt.Fprintf(&b, "client_set -name %s\n", Quote(d.o.Name))
	fmt.Fprintf(&b, "screen_add %s\n", screenID)
	fmt.Fprintf(&b, "screen_set %s -name %s -priority %s -heartbeat off -backlight %s\n",
		screenID, Quote(d.o.Name), d.o.Priority, onOff(d.backlight))
	for r := range d.rows {
		fmt.Fprintf(&b, "widget_add %s r%d string\n", screenID, r+1)
	}
	for keys := d.o.Keys; len(keys) > 0; {
		n := min(len(keys), 30) // LCDd parses at most 40 arguments
		b.WriteString("client_add_key")
		if !d.o.SharedKeys {
			b.WriteString(" -exclusively")
		}
		for _, k := range keys[:n] {
			b.WriteString(" " + Quote(k))
		}
		b.WriteString("\n")
		keys = keys[n:]
	}
	if err := d.writeLocked(ctx, b.String()); err != nil {
		return err
	}
	return d.flushLocked(ctx)
}

// read handles every line LCDd sends until the connection ends.
func (d *Dev) read(conn net.Conn, sc *bufio.Scanner) error {
	for {
		conn.SetReadDeadline(time.Now().Add(2 * d.o.PingInterval))
		if !sc.Scan() {
			err := sc.Err()
			if err == nil {
				err = errors.New("LCDd closed the connection")
			}
			return fmt.Errorf("lcdproc: reading from LCDd: %w", err)
		}
		r, err := ParseResponse(sc.Text())
		if err != nil {
			d.log.Warn("lcdproc: bad line from LCDd", "err", err)
			continue
		}
		switch r.Kind {
		case Huh:
			d.mu.Lock()
			d.stats.Refused++
			d.mu.Unlock()
			d.log.Warn("lcdproc: LCDd refused a command", "answer", r.Text)
		case Listen, Ignore:
			d.mu.Lock()
			d.visible = r.Kind == Listen
			d.mu.Unlock()
			d.log.Debug("lcdproc: screen", "state", r.Kind.String())
		case Key:
			d.mu.Lock()
			d.stats.KeysIn++
			d.mu.Unlock()
			select {
			case d.keys <- r.Text:
			default:
				d.mu.Lock()
				d.stats.KeysDropped++
				d.mu.Unlock()
				d.log.Warn("lcdproc: key dropped: nobody reads keys", "key", r.Text)
			}
		case Noop:
			select {
			case d.pong <- struct{}{}:
			default:
			}
		case Bye:
			return errors.New("lcdproc: LCDd said bye")
		case Success, Connect, Menu:
		}
	}
}

// ping sends a noop every PingInterval so that a silent connection is
// noticed (the reader's deadline).
func (d *Dev) ping(conn net.Conn, done <-chan struct{}) {
	t := time.NewTicker(d.o.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			d.mu.Lock()
			if d.conn == conn {
				if err := d.writeLocked(context.Background(), "noop\n"); err != nil {
					d.log.Warn("lcdproc: ping", "err", err)
				}
			}
			d.mu.Unlock()
		}
	}
}
