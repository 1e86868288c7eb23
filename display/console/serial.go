package console

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.bug.st/serial"
)

// Errors from a Serial.
var (
	// ErrDisconnected is returned by Write while the port is gone (USB
	// unplugged); Serial keeps trying to open it again.
	ErrDisconnected = errors.New("console: serial port disconnected")
	// ErrWriteTimeout is returned by Write when the port did not take the
	// data in time (or an earlier write is still blocked); the port is
	// closed and opened again.
	ErrWriteTimeout = errors.New("console: serial write timed out")
)

// SerialOpts configures OpenSerialOpts.
type SerialOpts struct {
	// Baud is the bit rate, such as 115200. 8N1, no flow control.
	Baud int
	// ReadPoll is how often a waiting Read looks at its deadline and at
	// Close; default 100ms. Every 5 ReadPolls the device path is checked
	// for presence, to notice an unplugged adapter nobody is reading.
	ReadPoll time.Duration
	// WriteTimeout bounds a Write when no write deadline is set; default 2s.
	WriteTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts to open the
	// port again after it disappeared; defaults 100ms and 2s.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives disconnects and reconnects; default slog.Default().
	Logger *slog.Logger
}

// Serial is a serial port that survives being unplugged: when the port
// fails, Read waits (within its deadline) while Serial polls for the device
// path with a capped backoff and opens it again; Write fails fast with
// ErrDisconnected meanwhile. It implements io.ReadWriteCloser, read and
// write deadlines, and Reopener for the Console.
type Serial struct {
	path string
	mode serial.Mode
	o    SerialOpts

	mu       sync.Mutex
	port     serial.Port   // nil while disconnected
	up       chan struct{} // closed when port is set; replaced when it goes down
	closed   bool
	rdl, wdl time.Time
	rdlCh    chan struct{} // closed when the read deadline changes
	lastErr  error

	writing  atomic.Bool
	broken   chan struct{}
	reopened chan struct{}
	done     chan struct{}
	wg       sync.WaitGroup
}

// OpenSerial opens the serial port at path (8N1, no flow control) and keeps
// it open until ctx is done or Close is called. The first open must
// succeed: its error tells whether the port is missing (errors.Is
// fs.ErrNotExist), not allowed (fs.ErrPermission) or busy.
func OpenSerial(ctx context.Context, path string, baud int) (*Serial, error) {
	return OpenSerialOpts(ctx, path, SerialOpts{Baud: baud})
}

// OpenSerialOpts is OpenSerial with options.
func OpenSerialOpts(ctx context.Context, path string, o SerialOpts) (*Serial, error) {
	if o.Baud <= 0 {
		return nil, fmt.Errorf("console: serial port %s: baud rate %d must be positive", path, o.Baud)
	}
	if o.ReadPoll <= 0 {
		o.ReadPoll = 100 * time.Millisecond
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 2 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(2*time.Second, o.MinBackoff)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Serial{
		path:     path,
		mode:     serial.Mode{BaudRate: o.Baud, DataBits: 8, Parity: serial.NoParity, StopBits: serial.OneStopBit},
		o:        o,
		up:       make(chan struct{}),
		rdlCh:    make(chan struct{}),
		broken:   make(chan struct{}, 1),
		reopened: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	p, err := s.open()
	if err != nil {
		return nil, err
	}
	s.setPort(p)
	s.wg.Add(1)
	go s.supervise(ctx)
	return s, nil
}

func (s *Serial) open() (serial.Port, error) {
	p, err := serial.Open(s.path, &s.mode)
	if err != nil {
		var pe *serial.PortError
		if errors.As(err, &pe) {
			switch pe.Code() {
			case serial.PermissionDenied:
				return nil, fmt.Errorf("console: open serial port %s: %w (%v)", s.path, fs.ErrPermission, err)
			case serial.PortNotFound:
				return nil, fmt.Errorf("console: open serial port %s: %w (%v)", s.path, fs.ErrNotExist, err)
			case serial.PortBusy:
				return nil, fmt.Errorf("console: open serial port %s: in use by another program: %w", s.path, err)
			}
		}
		return nil, fmt.Errorf("console: open serial port %s: %w", s.path, err)
	}
	if err := p.SetReadTimeout(s.o.ReadPoll); err != nil {
		p.Close()
		return nil, fmt.Errorf("console: serial port %s: set read timeout: %w", s.path, err)
	}
	return p, nil
}

func (s *Serial) setPort(p serial.Port) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		p.Close()
		return
	}
	s.port = p
	s.lastErr = nil
	close(s.up)
}

// fail takes p out of service after err; the supervisor reopens the port.
func (s *Serial) fail(p serial.Port, err error) {
	s.mu.Lock()
	if s.port != p || s.closed {
		s.mu.Unlock()
		return
	}
	s.port = nil
	s.up = make(chan struct{})
	s.lastErr = err
	s.mu.Unlock()
	s.o.Logger.Warn("console: serial port lost; reopening", "port", s.path, "err", err)
	p.Close()
	select {
	case s.broken <- struct{}{}:
	default:
	}
}

func (s *Serial) supervise(ctx context.Context) {
	defer s.wg.Done()
	// While the port is up, check now and then that its device path still
	// exists: an unplugged USB adapter is noticed even when nobody reads.
	check := time.NewTicker(5 * s.o.ReadPoll)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			s.shutdown()
			return
		case <-s.done:
			return
		case <-check.C:
			if _, err := os.Stat(s.path); errors.Is(err, fs.ErrNotExist) {
				s.mu.Lock()
				p := s.port
				s.mu.Unlock()
				if p != nil {
					s.fail(p, err)
				}
			}
			continue
		case <-s.broken:
		}
		backoff := s.o.MinBackoff
		for {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				s.shutdown()
				return
			case <-s.done:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, s.o.MaxBackoff)
			if _, err := os.Stat(s.path); err != nil {
				continue
			}
			p, err := s.open()
			if err != nil {
				s.o.Logger.Debug("console: serial port not ready", "port", s.path, "err", err)
				continue
			}
			s.setPort(p)
			s.o.Logger.Info("console: serial port reopened", "port", s.path)
			select {
			case s.reopened <- struct{}{}:
			default:
			}
			break
		}
	}
}

// Connected reports whether the port is open right now.
func (s *Serial) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port != nil
}

// Err returns why the port is disconnected, or nil.
func (s *Serial) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.port != nil {
		return nil
	}
	return s.lastErr
}

// Path returns the device path.
func (s *Serial) Path() string { return s.path }

// Reopened receives a value after the port was opened again.
func (s *Serial) Reopened() <-chan struct{} { return s.reopened }

// SetReadDeadline sets the time after which Read returns
// os.ErrDeadlineExceeded (noticed within SerialOpts.ReadPoll while data is
// awaited). The zero time means no deadline.
func (s *Serial) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	s.rdl = t
	close(s.rdlCh)
	s.rdlCh = make(chan struct{})
	s.mu.Unlock()
	return nil
}

// SetWriteDeadline sets the deadline for Write; the zero time means
// SerialOpts.WriteTimeout per Write.
func (s *Serial) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	s.wdl = t
	s.mu.Unlock()
	return nil
}

// Read reads from the port, waiting through disconnections until data, the
// read deadline or Close.
func (s *Serial) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		p, err := s.waitPort()
		if err != nil {
			return 0, err
		}
		n, err := p.Read(b)
		if n > 0 {
			return n, nil
		}
		if err != nil {
			if s.isClosed() {
				return 0, os.ErrClosed
			}
			s.fail(p, err)
			continue
		}
		// Read timeout (ReadPoll): look at the deadline and go on.
		s.mu.Lock()
		dl := s.rdl
		s.mu.Unlock()
		if !dl.IsZero() && !time.Now().Before(dl) {
			return 0, os.ErrDeadlineExceeded
		}
	}
}

func (s *Serial) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// waitPort returns the open port, waiting for it while disconnected.
func (s *Serial) waitPort() (serial.Port, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, os.ErrClosed
		}
		p, up, dl, dlCh := s.port, s.up, s.rdl, s.rdlCh
		s.mu.Unlock()
		if !dl.IsZero() && !time.Now().Before(dl) {
			return nil, os.ErrDeadlineExceeded
		}
		if p != nil {
			return p, nil
		}
		var t *time.Timer
		var timeout <-chan time.Time
		if !dl.IsZero() {
			t = time.NewTimer(time.Until(dl))
			timeout = t.C
		}
		select {
		case <-up:
		case <-dlCh:
		case <-timeout:
		case <-s.done:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// Write writes b to the port within the write deadline (or
// SerialOpts.WriteTimeout). While the port is gone it fails at once with
// ErrDisconnected.
func (s *Serial) Write(b []byte) (int, error) {
	s.mu.Lock()
	p, closed, dl := s.port, s.closed, s.wdl
	s.mu.Unlock()
	switch {
	case closed:
		return 0, os.ErrClosed
	case p == nil:
		return 0, ErrDisconnected
	case len(b) == 0:
		return 0, nil
	}
	if dl.IsZero() {
		dl = time.Now().Add(s.o.WriteTimeout)
	}
	if !time.Now().Before(dl) {
		return 0, os.ErrDeadlineExceeded
	}
	if !s.writing.CompareAndSwap(false, true) {
		return 0, ErrWriteTimeout // an earlier write is still stuck
	}
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	data := append([]byte(nil), b...) // the goroutine may outlive this call
	go func() {
		defer s.writing.Store(false)
		n := 0
		for n < len(data) {
			m, err := p.Write(data[n:min(len(data), n+256)])
			n += m
			if err != nil {
				res <- result{n, err}
				return
			}
			if m == 0 {
				res <- result{n, errors.New("serial write wrote nothing")}
				return
			}
		}
		res <- result{n, nil}
	}()
	t := time.NewTimer(time.Until(dl))
	defer t.Stop()
	select {
	case r := <-res:
		if r.err != nil {
			s.fail(p, r.err)
			return r.n, fmt.Errorf("console: write serial port %s: %w", s.path, r.err)
		}
		return r.n, nil
	case <-t.C:
		s.fail(p, ErrWriteTimeout)
		return 0, ErrWriteTimeout
	case <-s.done:
		return 0, os.ErrClosed
	}
}

// Close closes the port and stops reopening it.
func (s *Serial) Close() error {
	s.shutdown()
	s.wg.Wait()
	return nil
}

func (s *Serial) shutdown() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	p := s.port
	s.port = nil
	close(s.done)
	s.mu.Unlock()
	if p != nil {
		p.Close()
	}
}
