package checks

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.bug.st/serial"
)

// SerialPort is what SerialLoopback needs of a serial port; the Port of
// go.bug.st/serial has it.
type SerialPort interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
	Close() error
	SetMode(mode *serial.Mode) error
	SetReadTimeout(t time.Duration) error
	ResetInputBuffer() error
}

// DefaultBauds are the rates SerialLoopback tries when none are given: the
// console default of most boards and the usual fast rate.
var DefaultBauds = []int{9600, 115200}

// DefaultSerialBytes is how many bytes each pattern sends by default.
const DefaultSerialBytes = 1024

// SerialOptions configure SerialLoopback.
type SerialOptions struct {
	// Bauds are the rates to test, in order; nil means DefaultBauds.
	Bauds []int
	// Bytes is the length of each pattern; 0 means DefaultSerialBytes.
	Bytes int
	// Seed seeds the random pattern (reported, so a failure can be
	// replayed); 0 means 1.
	Seed uint64
	// Open opens the port; nil means go.bug.st/serial's Open.
	Open func(path string, mode *serial.Mode) (SerialPort, error)
	// Quiet is how long the line must stay silent, once everything was
	// written, for a pattern to end short; 0 means 40 character times but
	// at least 250ms.
	Quiet time.Duration
}

func openSerial(path string, mode *serial.Mode) (SerialPort, error) {
	p, err := serial.Open(path, mode)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// serialRun is one pattern at one baud rate.
type serialRun struct {
	baud      int
	pattern   string
	sent      int
	received  int
	corrupted int // bytes that differ from what was sent at their offset
	missing   int
	extra     int
	firstDiff int // offset of the first corrupted byte; -1 for none
	diffSent  byte
	diffGot   byte
	elapsed   time.Duration // first write to last byte received
	writeErr  error
}

func (r serialRun) ok() bool {
	return r.writeErr == nil && r.corrupted == 0 && r.missing == 0 && r.extra == 0
}

// bytesPerSecond is the measured throughput.
func (r serialRun) bytesPerSecond() float64 {
	if r.elapsed <= 0 || r.received == 0 {
		return 0
	}
	return float64(r.received) / r.elapsed.Seconds()
}

// serialPatterns returns the test patterns of n bytes: counting, 0x00/0xFF
// alternating (every bit flips between bytes, and 0x00 and 0xFF are the
// bytes a wrong baud rate or a break mangles first), and random.
func serialPatterns(n int, seed uint64) []struct {
	name string
	data []byte
} {
	count := make([]byte, n)
	flip := make([]byte, n)
	random := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range n {
		count[i] = byte(i)
		if i%2 == 1 {
			flip[i] = 0xFF
		}
		random[i] = byte(rng.Uint32())
	}
	return []struct {
		name string
		data []byte
	}{{"counting", count}, {"00/FF", flip}, {"random", random}}
}

// SerialLoopback tests a serial port whose TX is wired to its own RX: at
// each baud rate it sends three patterns (counting, 0x00/0xFF, random),
// reads back what arrives, and reports bytes sent, received and corrupted,
// throughput against the line's maximum (baud/10 bytes per second for 8N1:
// a start bit, 8 data bits and a stop bit) and a verdict.
func SerialLoopback(ctx context.Context, path string, o SerialOptions) Result {
	r := newResult("serial-loopback")
	if len(o.Bauds) == 0 {
		o.Bauds = DefaultBauds
	}
	if o.Bytes <= 0 {
		o.Bytes = DefaultSerialBytes
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Open == nil {
		o.Open = openSerial
	}
	for _, b := range o.Bauds {
		if b <= 0 {
			r.Fail("baud rate %d: must be positive", b)
			return *r
		}
	}
	port, err := o.Open(path, &serial.Mode{BaudRate: o.Bauds[0], DataBits: 8, Parity: serial.NoParity, StopBits: serial.OneStopBit})
	if err != nil {
		r.Fail("%v", ExplainOpen(SerialDevice, path, err))
		return *r
	}
	defer port.Close()
	r.Detailf("port %s, 8N1, %d bytes per pattern, random seed %d", path, o.Bytes, o.Seed)

	var runs []serialRun
	patterns := serialPatterns(o.Bytes, o.Seed)
	modeErr := map[int]error{}
	for _, baud := range o.Bauds {
		if err := port.SetMode(&serial.Mode{BaudRate: baud, DataBits: 8, Parity: serial.NoParity, StopBits: serial.OneStopBit}); err != nil {
			modeErr[baud] = err
			r.Detailf("%d baud: the port refused the rate: %v", baud, err)
			continue
		}
		for _, p := range patterns {
			if ctx.Err() != nil {
				break
			}
			run := transfer(ctx, port, p.data, baud, o.Quiet)
			run.pattern = p.name
			runs = append(runs, run)
			r.Details = append(r.Details, describeRun(run))
			if run.received == 0 {
				break // nothing comes back at this rate: the other patterns would not either
			}
		}
	}
	if ctx.Err() != nil {
		r.Fail("interrupted: %v", context.Cause(ctx))
	}
	serialVerdict(r, runs, modeErr, o.Bauds)
	return *r
}

// transfer sends data and reads back what arrives until all of it did, or
// the line stayed quiet after the last write, or a deadline of twice the
// line time (plus a second) passed.
func transfer(ctx context.Context, port SerialPort, data []byte, baud int, quiet time.Duration) serialRun {
	run := serialRun{baud: baud, sent: len(data), firstDiff: -1}
	charTime := time.Duration(float64(10*time.Second) / float64(baud))
	if quiet <= 0 {
		quiet = max(250*time.Millisecond, 40*charTime)
	}
	lineTime := time.Duration(len(data)) * charTime
	deadline := time.Now().Add(2*lineTime + time.Second + quiet)

	_ = port.ResetInputBuffer()
	if err := port.SetReadTimeout(20 * time.Millisecond); err != nil {
		run.writeErr = fmt.Errorf("setting the read timeout: %w", err)
		return run
	}

	var (
		mu        sync.Mutex
		writeDone time.Time
		writeErr  error
	)
	wctx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	start := time.Now()
	written := make(chan struct{})
	go func() {
		defer close(written)
		var err error
		for off := 0; off < len(data) && err == nil; {
			if wctx.Err() != nil {
				err = context.Cause(wctx)
				break
			}
			var n int
			n, err = port.Write(data[off:min(off+256, len(data))])
			off += n
		}
		mu.Lock()
		writeDone, writeErr = time.Now(), err
		mu.Unlock()
	}()

	got := make([]byte, 0, len(data))
	buf := make([]byte, 4096)
	var lastRx time.Time
	var full time.Time // when the last expected byte arrived
	for ctx.Err() == nil {
		n, err := port.Read(buf)
		now := time.Now()
		if n > 0 {
			got = append(got, buf[:n]...)
			lastRx = now
			if full.IsZero() && len(got) >= len(data) {
				full = now
			}
		}
		if err != nil {
			run.writeErr = fmt.Errorf("reading: %w", err)
			break
		}
		if !full.IsZero() {
			// Everything arrived; listen a little longer for extra bytes.
			if now.Sub(full) >= max(20*time.Millisecond, 5*charTime) {
				break
			}
			continue
		}
		if now.After(deadline) {
			break
		}
		mu.Lock()
		wd := writeDone
		mu.Unlock()
		if !wd.IsZero() && now.Sub(later(wd, lastRx)) >= quiet {
			break
		}
	}
	stopWriter()
	select {
	case <-written:
		mu.Lock()
		if writeErr != nil && !errors.Is(writeErr, context.Canceled) && run.writeErr == nil {
			run.writeErr = fmt.Errorf("writing: %w", writeErr)
		}
		mu.Unlock()
	case <-time.After(2 * time.Second):
		if run.writeErr == nil {
			run.writeErr = errors.New("writing stalled: the port does not send (hardware flow control on, or CTS held?)")
		}
	}

	if !lastRx.IsZero() {
		run.elapsed = lastRx.Sub(start)
	}
	run.received = len(got)
	for i := range min(len(got), len(data)) {
		if got[i] != data[i] {
			if run.firstDiff < 0 {
				run.firstDiff, run.diffSent, run.diffGot = i, data[i], got[i]
			}
			run.corrupted++
		}
	}
	run.missing = max(0, len(data)-len(got))
	run.extra = max(0, len(got)-len(data))
	return run
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func describeRun(run serialRun) string {
	maxRate := float64(run.baud) / 10
	var b strings.Builder
	fmt.Fprintf(&b, "%6d baud  %-8s  sent %d  received %d  corrupted %d", run.baud, run.pattern, run.sent, run.received, run.corrupted)
	if run.missing > 0 {
		fmt.Fprintf(&b, "  missing %d", run.missing)
	}
	if run.extra > 0 {
		fmt.Fprintf(&b, "  extra %d", run.extra)
	}
	if rate := run.bytesPerSecond(); rate > 0 {
		fmt.Fprintf(&b, "  %.0f B/s = %.1f%% of %.0f B/s", rate, 100*rate/maxRate, maxRate)
	}
	if run.firstDiff >= 0 {
		fmt.Fprintf(&b, "  (first difference at byte %d: sent %#02x, got %#02x)", run.firstDiff, run.diffSent, run.diffGot)
	}
	if run.writeErr != nil {
		fmt.Fprintf(&b, "  %v", run.writeErr)
	}
	return b.String()
}

// serialVerdict sets the metrics and the summary from the runs.
func serialVerdict(r *Result, runs []serialRun, modeErr map[int]error, bauds []int) {
	var sent, received, corrupted, missing, extra int
	type perBaud struct {
		ok, nothing, tried bool
		bytes              int
		elapsed            time.Duration
		corrupted, missing int
	}
	byBaud := map[int]*perBaud{}
	for _, b := range bauds {
		byBaud[b] = &perBaud{ok: modeErr[b] == nil, nothing: true}
	}
	fast := false
	for _, run := range runs {
		sent += run.sent
		received += run.received
		corrupted += run.corrupted
		missing += run.missing
		extra += run.extra
		pb := byBaud[run.baud]
		pb.tried = true
		pb.ok = pb.ok && run.ok()
		pb.nothing = pb.nothing && run.received == 0
		pb.bytes += run.received
		pb.elapsed += run.elapsed
		pb.corrupted += run.corrupted
		pb.missing += run.missing
		if run.bytesPerSecond() > 1.05*float64(run.baud)/10 {
			fast = true
		}
	}
	r.Set("bytes_sent", float64(sent))
	r.Set("bytes_received", float64(received))
	r.Set("bytes_corrupted", float64(corrupted))
	r.Set("bytes_missing", float64(missing))
	r.Set("bytes_extra", float64(extra))
	for _, b := range bauds {
		pb := byBaud[b]
		if !pb.tried || pb.elapsed <= 0 {
			continue
		}
		rate := float64(pb.bytes) / pb.elapsed.Seconds()
		r.Set("baud_"+strconv.Itoa(b)+"_bytes_per_s", round3(rate))
		r.Set("baud_"+strconv.Itoa(b)+"_pct_of_max", round3(100*rate/(float64(b)/10)))
	}
	if fast {
		r.Detailf("note: faster than the line rate: the far end is not a real UART (a PTY, or a USB bridge's buffering)")
	}
	if !r.Pass {
		return
	}

	var okBauds, badBauds, silentBauds []string
	for _, b := range bauds {
		pb := byBaud[b]
		switch {
		case modeErr[b] != nil:
			badBauds = append(badBauds, strconv.Itoa(b))
		case pb.tried && pb.nothing:
			silentBauds = append(silentBauds, strconv.Itoa(b))
		case pb.tried && pb.ok:
			okBauds = append(okBauds, strconv.Itoa(b))
		case pb.tried:
			badBauds = append(badBauds, strconv.Itoa(b))
		}
	}
	for _, run := range runs {
		if run.writeErr != nil {
			r.Fail("%d baud %s: %v", run.baud, run.pattern, run.writeErr)
			return
		}
	}
	switch {
	case len(runs) == 0:
		r.Fail("no baud rate could be set: %v", modeErr[bauds[0]])
	case received == 0:
		r.Fail("nothing received: is TX wired to RX? (sent %d bytes at %s baud, none came back)", sent, strings.Join(silentBauds, ", "))
	case len(okBauds) == len(bauds):
		r.Summary = fmt.Sprintf("all %d bytes came back intact at %s baud", sent, strings.Join(okBauds, ", "))
	case len(silentBauds) > 0 && len(badBauds) == 0:
		r.Fail("nothing received at %s baud while %s baud works: the port or the adapter cannot do that rate",
			strings.Join(silentBauds, ", "), strings.Join(okBauds, ", "))
	case corrupted > 0 && float64(corrupted+extra) >= 0.25*float64(received):
		r.Fail("received bytes do not match what was sent (%d of %d corrupted at %s baud): is the far end at the same baud rate? (or noise: check ground and cable length)",
			corrupted, received, strings.Join(badBauds, ", "))
	case len(okBauds) > 0:
		r.Fail("errors at %s baud (%d corrupted, %d missing) while %s baud is clean: the line is too noisy or too long for the faster rate",
			strings.Join(badBauds, ", "), corrupted, missing, strings.Join(okBauds, ", "))
	case corrupted > 0:
		r.Fail("%d of %d bytes corrupted at %s baud: noise on the line? (check ground and cable length)", corrupted, received, strings.Join(badBauds, ", "))
	case missing > 0:
		r.Fail("%d of %d bytes lost at %s baud: the receiver overran or the line drops out (try a lower rate)", missing, sent, strings.Join(badBauds, ", "))
	default:
		r.Fail("%d unexpected extra bytes at %s baud: is something else talking on RX (a login console)?", extra, strings.Join(badBauds, ", "))
	}
	if len(silentBauds) > 0 && received > 0 {
		r.Detailf("nothing received at %s baud", strings.Join(silentBauds, ", "))
	}
}
