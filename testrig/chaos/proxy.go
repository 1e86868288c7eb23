package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a Proxy does with the bytes of its connections.
type Mode string

// Modes of a Proxy.
const (
	Normal Mode = "normal" // forward (after the latency, if one is set)
	Stall  Mode = "stall"  // keep sockets open, forward nothing
	Refuse Mode = "refuse" // reset new connections at once
)

// Options configure New.
type Options struct {
	// Listen is the address to listen on (default "127.0.0.1:0").
	Listen string
	// Target is the address every connection is forwarded to (required).
	Target string
	// DialTimeout bounds the dial to Target (default 5s).
	DialTimeout time.Duration
	// Logger (nil: discarded).
	Logger *slog.Logger
}

// Stats count what a Proxy did.
type Stats struct {
	Accepted  int64 `json:"accepted"`   // connections accepted and forwarded
	Refused   int64 `json:"refused"`    // reset at once (refuse mode) or target unreachable
	Cut       int64 `json:"cut"`        // reset by Cut
	Active    int64 `json:"active"`     // open now
	BytesUp   int64 `json:"bytes_up"`   // client -> target
	BytesDown int64 `json:"bytes_down"` // target -> client
}

// Proxy is a fault-injecting TCP proxy.
type Proxy struct {
	opt Options
	ln  net.Listener
	log *slog.Logger

	mu      sync.Mutex
	mode    Mode
	latency time.Duration
	changed chan struct{} // closed and replaced at every change
	conns   map[*pair]struct{}
	closed  bool

	accepted, refused, cut, bytesUp, bytesDown atomic.Int64

	wg   sync.WaitGroup
	done chan struct{}
}

// New listens on opt.Listen and starts forwarding to opt.Target.
func New(opt Options) (*Proxy, error) {
	if opt.Target == "" {
		return nil, errors.New("chaos: target address is required")
	}
	if opt.Listen == "" {
		opt.Listen = "127.0.0.1:0"
	}
	if opt.DialTimeout <= 0 {
		opt.DialTimeout = 5 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", opt.Listen)
	if err != nil {
		return nil, fmt.Errorf("chaos: listening on %s: %w", opt.Listen, err)
	}
	p := &Proxy{opt: opt, ln: ln, log: opt.Logger, mode: Normal, changed: make(chan struct{}),
		conns: map[*pair]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address connections are forwarded to.
func (p *Proxy) Target() string { return p.opt.Target }

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Latency returns the current one-way latency.
func (p *Proxy) Latency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency
}

// SetMode switches the mode; a stall ending lets the held bytes flow.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == m {
		return
	}
	p.log.Info("chaos: mode", "mode", m)
	p.mode = m
	p.notifyLocked()
}

// SetLatency delays every chunk by d in each direction (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
	p.notifyLocked()
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// state returns mode, latency and the channel closed at the next change.
func (p *Proxy) state() (Mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency, p.changed
}

// Cut resets every open connection (both sides) and returns how many.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	conns := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close(true)
	}
	p.cut.Add(int64(len(conns)))
	if len(conns) > 0 {
		p.log.Info("chaos: cut", "connections", len(conns))
	}
	return len(conns)
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	active := len(p.conns)
	p.mu.Unlock()
	return Stats{Accepted: p.accepted.Load(), Refused: p.refused.Load(), Cut: p.cut.Load(),
		Active: int64(active), BytesUp: p.bytesUp.Load(), BytesDown: p.bytesDown.Load()}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	close(p.done)
	conns := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close(false)
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.done:
				return
			default:
			}
			// Out of file descriptors and the like: retry after a pause.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("chaos: accept", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-p.done:
				return
			}
		}
		backoff = 0
		if mode, _, _ := p.state(); mode == Refuse {
			reset(conn)
			p.refused.Add(1)
			continue
		}
		p.wg.Add(1)
		go p.serve(conn)
	}
}

// reset closes c with an RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), p.opt.DialTimeout)
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	server, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.opt.Target)
	cancel()
	if err != nil {
		p.log.Debug("chaos: target unreachable", "target", p.opt.Target, "err", err)
		p.refused.Add(1)
		reset(client)
		return
	}
	c := &pair{p: p, client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	p.accepted.Add(1)

	var halves sync.WaitGroup
	halves.Add(2)
	go func() { defer halves.Done(); c.pipe(client, server, &p.bytesUp) }()
	go func() { defer halves.Done(); c.pipe(server, client, &p.bytesDown) }()
	halves.Wait()
	c.close(false)
}

// pair is one proxied connection.
type pair struct {
	p              *Proxy
	client, server net.Conn
	done           chan struct{}
	once           sync.Once
}

func (c *pair) close(rst bool) {
	c.once.Do(func() {
		close(c.done)
		if rst {
			reset(c.client)
			reset(c.server)
		} else {
			c.client.Close()
			c.server.Close()
		}
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

type chunk struct {
	data []byte
	at   time.Time
}

// pipe forwards src to dst: a reader keeps reading (so a peer closing is
// seen even in a stall) into a bounded queue; the writer delivers each
// chunk when the mode lets it and its latency has passed.
func (c *pair) pipe(src, dst net.Conn, counter *atomic.Int64) {
	q := make(chan chunk, 64)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case q <- chunk{buf[:n], time.Now()}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					c.close(false)
				}
				return
			}
		}
	}()
	for ch := range q {
		if !c.deliver(ch, dst) {
			c.close(false)
			for range q { // let the reader finish
			}
			return
		}
		counter.Add(int64(len(ch.data)))
	}
	// src said EOF: pass the half-close on once everything is delivered.
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		c.close(false)
	}
}

// deliver waits out a stall and the latency, then writes ch to dst.
func (c *pair) deliver(ch chunk, dst net.Conn) bool {
	for {
		mode, latency, changed := c.p.state()
		if mode == Stall {
			select {
			case <-changed:
				continue
			case <-c.done:
				return false
			}
		}
		if wait := time.Until(ch.at.Add(latency)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-changed: // a stall or new latency may have started
				t.Stop()
				continue
			case <-c.done:
				t.Stop()
				return false
			}
			continue // re-check the mode before writing
		}
		break
	}
	_, err := dst.Write(ch.data)
	return err == nil
}
