package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// The load generator is termrig load's lean mode over MQTT: each device
// is one TCP connection speaking MQTT 3.1.1 (packets encoded and decoded
// by paho's packets package), one reader goroutine per device, a shared
// pool of writers and one heartbeat loop for all devices, the messages
// paced in total over the devices round-robin. Devices keep persistent
// sessions (clean session off), the MQTT counterpart of termserver's
// session per peer id.

const (
	readBufSize = 1024
	writeWait   = 10 * time.Second
	maxWriters  = 32
	hbTick      = 100 * time.Millisecond
)

type loadOptions struct {
	broker         string
	devices        int
	rate           float64
	duration       time.Duration
	drain          time.Duration
	hold           bool
	connectRate    int
	connectTimeout time.Duration
	prefix         string
	pids           []int
	keepalive      time.Duration
	text           string
	json           bool
}

func parseLoad(args []string) (loadOptions, error) {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	var o loadOptions
	var pids string
	fs.StringVar(&o.broker, "broker", "", "the MQTT broker, host:port")
	fs.IntVar(&o.devices, "devices", 10, "devices, one connection each")
	fs.Float64Var(&o.rate, "rate", 10, "messages per second over all devices (0: none)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long to send")
	fs.DurationVar(&o.drain, "drain", 3*time.Second, "how long to wait for the last replies")
	fs.BoolVar(&o.hold, "hold", false, "connect the devices, print \"connected N devices\" and hold them (heartbeating) until interrupted")
	fs.IntVar(&o.connectRate, "connect-rate", 2000, "devices connected per second")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 10*time.Second, "time for a device's TCP connect, CONNACK and SUBACK")
	fs.StringVar(&o.prefix, "peer-prefix", "load", "device ids are PREFIX-0, PREFIX-1, ...")
	fs.StringVar(&pids, "server-pid", "", "comma-separated pids whose CPU time (utime+stime) over the send and drain phase is summed per reply")
	fs.DurationVar(&o.keepalive, "keepalive", 5*time.Second, "MQTT keepalive; each device sends PINGREQ this often")
	fs.StringVar(&o.text, "text", "hello", "each message's text")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for f := range strings.SplitSeq(pids, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || p <= 0 {
			return o, fmt.Errorf("load: --server-pid %q: not a pid", f)
		}
		o.pids = append(o.pids, p)
	}
	ka := o.keepalive.Seconds()
	switch {
	case o.broker == "":
		return o, errors.New("load: --broker is required")
	case o.devices < 1:
		return o, fmt.Errorf("load: --devices %d: want at least 1", o.devices)
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		return o, fmt.Errorf("load: --rate %v: want a finite rate >= 0", o.rate)
	case o.rate*o.duration.Seconds() > 1e8:
		return o, fmt.Errorf("load: --rate %v for %v: more than 100 million messages", o.rate, o.duration)
	case o.connectRate < 1:
		return o, fmt.Errorf("load: --connect-rate %d: want at least 1", o.connectRate)
	case ka < 1 || ka > 65535 || ka != math.Trunc(ka):
		return o, fmt.Errorf("load: --keepalive %v: want whole seconds, 1s to 65535s", o.keepalive)
	case strings.ContainsAny(o.prefix, "/+#") || o.prefix == "":
		return o, fmt.Errorf("load: --peer-prefix %q: want a non-empty prefix without / + #", o.prefix)
	}
	return o, nil
}

// device is one simulated device. conn and br are set before alive and
// then read only by the device's reader; writes (writers, the reader's
// PUBACKs, the close) hold wmu.
type device struct {
	id      string
	conn    net.Conn
	br      *bufio.Reader
	alive   atomic.Bool
	wmu     sync.Mutex
	nextPID uint16           // guarded by wmu
	pending map[uint16]int64 // packet id -> message seq, QoS 1 publishes not yet PUBACKed; guarded by wmu
	// nextPing is when the heartbeat loop next pings (unix ns).
	nextPing atomic.Int64
}

// packetID returns the next free packet id (wmu held): never 0.
func (d *device) packetID() uint16 {
	for {
		d.nextPID++
		if d.nextPID == 0 {
			continue
		}
		if _, busy := d.pending[d.nextPID]; !busy {
			return d.nextPID
		}
	}
}

// write writes one encoded packet with the write deadline (wmu held).
func (d *device) writeLocked(p packets.ControlPacket) error {
	if err := d.conn.SetWriteDeadline(time.Now().Add(writeWait)); err != nil {
		return err
	}
	return p.Write(d.conn) // each packet type's Write is one conn.Write
}

func (d *device) write(p packets.ControlPacket) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	return d.writeLocked(p)
}

type jobKind uint8

const (
	jobMessage jobKind = iota
	jobPing
)

type job struct {
	d    *device
	kind jobKind
	n    int64
}

// loader is one load run.
type loader struct {
	o     loadOptions
	log   *slog.Logger
	run   string
	devs  []*device
	track *tracker
	jobs  chan job
	dial  net.Dialer

	closing atomic.Bool
	devWG   sync.WaitGroup
	// queued counts the messages handed to the writers and not yet
	// written: the drain waits for them too.
	queued atomic.Int64

	mu           sync.Mutex
	connectErrs  map[string]int
	failed       int
	disconnected int

	sendErrors, pingsSent, pongs, badPackets, unexpected, stale atomic.Int64
}

func newRunID() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("load: make run id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func newLoader(o loadOptions, log *slog.Logger) (*loader, error) {
	run, err := newRunID()
	if err != nil {
		return nil, err
	}
	expected := int64(0)
	if o.rate > 0 {
		expected = int64(math.Ceil(o.rate*o.duration.Seconds())) + 16
	}
	l := &loader{
		o: o, log: log, run: run,
		devs:        make([]*device, o.devices),
		track:       newTracker(expected),
		jobs:        make(chan job, 1024),
		connectErrs: map[string]int{},
	}
	for i := range l.devs {
		l.devs[i] = &device{id: o.prefix + "-" + strconv.Itoa(i), pending: map[uint16]int64{}}
	}
	return l, nil
}

// runLoad connects the devices, sends, drains and closes; status gets the
// "connected N devices" line of --hold. Cancelling ctx stops early (and
// ends a hold).
func runLoad(ctx context.Context, o loadOptions, log *slog.Logger, status io.Writer) (*report, error) {
	l, err := newLoader(o, log)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var writers sync.WaitGroup
	for range min(o.devices, maxWriters) {
		writers.Add(1)
		go func() {
			defer writers.Done()
			l.writer()
		}()
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	var hbDone sync.WaitGroup
	hbDone.Add(1)
	go func() {
		defer hbDone.Done()
		l.heartbeat(hbCtx)
	}()

	l.connectAll(ctx)
	connected := l.connectedCount()
	log.Info("connect phase done", "connected", connected, "failed", o.devices-connected, "took", time.Since(start).Round(time.Millisecond))

	var sendStart, sendEnd time.Time
	var cpu cpuMeter
	switch {
	case o.hold:
		fmt.Fprintf(status, "connected %d devices\n", connected)
		<-ctx.Done()
	case connected == 0:
	default:
		cpu.start(o.pids)
		sendStart = time.Now()
		l.sendLoop(ctx)
		sendEnd = time.Now()
		l.drain(ctx)
		cpu.stop(l.track.replied.Load())
	}
	stopHB()
	hbDone.Wait()
	close(l.jobs)
	writers.Wait()
	l.closeAll()
	rep := l.report(sendStart, sendEnd, ctx.Err() != nil)
	rep.ElapsedMs = ms(time.Since(start))
	cpu.fill(rep)
	return rep, nil
}

func (l *loader) connectedCount() int {
	n := 0
	for _, d := range l.devs {
		if d.alive.Load() {
			n++
		}
	}
	return n
}

// connectAll starts the devices at o.connectRate per second, at most that
// many handshakes in flight, and returns when every handshake is done.
func (l *loader) connectAll(ctx context.Context) {
	interval := time.Second / time.Duration(l.o.connectRate)
	sem := make(chan struct{}, l.o.connectRate)
	var hs sync.WaitGroup
	start := time.Now()
	for i, d := range l.devs {
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			t := time.NewTimer(w)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		if ctx.Err() == nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			l.mu.Lock()
			l.failed += len(l.devs) - i
			l.connectErrs["not dialed: interrupted"] += len(l.devs) - i
			l.mu.Unlock()
			break
		}
		hs.Add(1)
		l.devWG.Add(1)
		go func() {
			defer l.devWG.Done()
			err := l.handshake(ctx, d)
			<-sem
			hs.Done()
			if err != nil {
				l.mu.Lock()
				l.failed++
				if len(l.connectErrs) < 5 {
					l.connectErrs[err.Error()]++
				}
				l.mu.Unlock()
				return
			}
			l.read(d)
		}()
	}
	hs.Wait()
}

// handshake dials the broker for d, sends CONNECT (persistent session)
// and SUBSCRIBE to d's reply topic (QoS 1), and makes d alive.
func (l *loader) handshake(ctx context.Context, d *device) error {
	hctx, cancel := context.WithTimeout(ctx, l.o.connectTimeout)
	defer cancel()
	conn, err := l.dial.DialContext(hctx, "tcp", l.o.broker)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			conn.Close()
		}
	}()
	stop := context.AfterFunc(hctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	d.conn, d.br = conn, bufio.NewReaderSize(conn, readBufSize)
	c := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	c.ProtocolName, c.ProtocolVersion = "MQTT", 4
	c.ClientIdentifier = d.id
	c.Keepalive = uint16(l.o.keepalive / time.Second)
	c.CleanSession = false
	if err := d.writeLocked(c); err != nil {
		return fmt.Errorf("send CONNECT: %w", err)
	}
	p, err := packets.ReadPacket(d.br)
	if err != nil {
		return fmt.Errorf("wait for CONNACK: %w", err)
	}
	ack, isAck := p.(*packets.ConnackPacket)
	switch {
	case !isAck:
		return fmt.Errorf("got %s instead of CONNACK", packetName(p))
	case ack.ReturnCode != packets.Accepted:
		return fmt.Errorf("CONNACK refused: %s", packets.ConnackReturnCodes[ack.ReturnCode])
	}
	s := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
	s.MessageID = d.packetID()
	s.Topics, s.Qoss = []string{replyTopic(d.id)}, []byte{1}
	if err := d.writeLocked(s); err != nil {
		return fmt.Errorf("send SUBSCRIBE: %w", err)
	}
	for {
		p, err := packets.ReadPacket(d.br)
		if err != nil {
			return fmt.Errorf("wait for SUBACK: %w", err)
		}
		if sa, isSub := p.(*packets.SubackPacket); isSub {
			if len(sa.ReturnCodes) != 1 || sa.ReturnCodes[0] > 2 {
				return fmt.Errorf("SUBSCRIBE %s refused: %v", replyTopic(d.id), sa.ReturnCodes)
			}
			break
		}
		// A persistent session's leftovers may come before the SUBACK.
		if err := l.handle(d, p, time.Now()); err != nil {
			return err
		}
	}
	if !stop() {
		return fmt.Errorf("no SUBACK within %v", l.o.connectTimeout)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return err
	}
	d.nextPing.Store(time.Now().Add(l.o.keepalive).UnixNano())
	ok = true
	d.alive.Store(true)
	return nil
}

// packetName is p's type: the start of its String ("CONNACK: dup: ...").
func packetName(p packets.ControlPacket) string {
	name, _, _ := strings.Cut(p.String(), ":")
	return name
}

// read reads d's packets until its connection ends.
func (l *loader) read(d *device) {
	defer d.conn.Close()
	for {
		p, err := packets.ReadPacket(d.br)
		at := time.Now()
		if err == nil {
			err = l.handle(d, p, at)
		}
		if err != nil {
			d.alive.Store(false)
			if !l.closing.Load() {
				l.log.Debug("device disconnected", "device", d.id, "err", err)
				l.mu.Lock()
				l.disconnected++
				l.mu.Unlock()
			}
			return
		}
	}
}

// handle is d's reaction to packet p, read at at. An error ends the
// connection (it failed a write).
func (l *loader) handle(d *device, p packets.ControlPacket, at time.Time) error {
	switch p := p.(type) {
	case *packets.PubackPacket:
		d.wmu.Lock()
		n, ok := d.pending[p.MessageID]
		delete(d.pending, p.MessageID)
		d.wmu.Unlock()
		if !ok {
			l.unexpected.Add(1)
			return nil
		}
		l.track.ack(n, at)
	case *packets.PublishPacket:
		if p.Qos > 0 {
			a := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
			a.MessageID = p.MessageID
			if err := d.write(a); err != nil {
				return fmt.Errorf("send PUBACK: %w", err)
			}
		}
		n, ours, err := parseReply(l.run, p.Payload)
		switch {
		case err != nil:
			l.badPackets.Add(1)
		case !ours:
			l.stale.Add(1)
		default:
			l.track.reply(n, at)
		}
	case *packets.PingrespPacket:
		l.pongs.Add(1)
	default:
		l.unexpected.Add(1)
	}
	return nil
}

// writer sends queued jobs until the queue is closed.
func (l *loader) writer() {
	pub := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	pub.Qos = 1
	ping := packets.NewControlPacket(packets.Pingreq)
	var buf []byte
	for j := range l.jobs {
		if j.kind == jobMessage {
			l.writeJob(j, pub, &buf)
			l.queued.Add(-1)
			continue
		}
		if !j.d.alive.Load() {
			continue
		}
		if err := j.d.write(ping); err != nil {
			j.d.conn.Close()
			continue
		}
		l.pingsSent.Add(1)
	}
}

// writeJob sends message job j with pub, buf its payload buffer.
func (l *loader) writeJob(j job, pub *packets.PublishPacket, buf *[]byte) {
	if !j.d.alive.Load() {
		return
	}
	*buf = appendRequest((*buf)[:0], messageID(l.run, j.n), l.o.text)
	pub.TopicName, pub.Payload = requestTopic(j.d.id), *buf
	l.sendMessage(j.d, pub, j.n)
}

func (l *loader) sendMessage(d *device, pub *packets.PublishPacket, n int64) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if !d.alive.Load() {
		return
	}
	pub.MessageID = d.packetID()
	d.pending[pub.MessageID] = n
	l.track.sending(n, time.Now())
	if err := d.writeLocked(pub); err != nil {
		delete(d.pending, pub.MessageID)
		l.track.sendFailed(n)
		l.sendErrors.Add(1)
		d.conn.Close()
	}
}

// heartbeat queues a PINGREQ for every live device each keepalive.
func (l *loader) heartbeat(ctx context.Context) {
	t := time.NewTicker(hbTick)
	defer t.Stop()
	every := int64(l.o.keepalive)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, d := range l.devs {
				if !d.alive.Load() || now.UnixNano() < d.nextPing.Load() {
					continue
				}
				d.nextPing.Store(now.UnixNano() + every)
				select {
				case l.jobs <- job{d: d, kind: jobPing}:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// sendLoop sends o.rate messages per second in total, round-robin over
// the live devices, for o.duration.
func (l *loader) sendLoop(ctx context.Context) {
	start := time.Now()
	end := start.Add(l.o.duration)
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	if l.o.rate <= 0 {
		<-ctx.Done()
		return
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	var n int64
	next := 0
	for {
		now := time.Now()
		if !now.Before(end) {
			return
		}
		due := min(int64(now.Sub(start).Seconds()*l.o.rate)+1, l.track.capacity())
		for ; n < due; n++ {
			d := l.pick(&next)
			if d == nil {
				l.log.Warn("no device left connected: sending stopped")
				return
			}
			l.queued.Add(1)
			select {
			case l.jobs <- job{d: d, kind: jobMessage, n: n}:
			case <-ctx.Done():
				l.queued.Add(-1)
				return
			}
		}
		at := start.Add(time.Duration(float64(n) / l.o.rate * float64(time.Second)))
		timer.Reset(min(time.Until(at), time.Until(end)))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

func (l *loader) pick(next *int) *device {
	for range len(l.devs) {
		d := l.devs[*next]
		*next = (*next + 1) % len(l.devs)
		if d.alive.Load() {
			return d
		}
	}
	return nil
}

// drain waits up to o.drain for the replies still outstanding and the
// messages still queued for the writers.
func (l *loader) drain(ctx context.Context) {
	done := func() bool { return l.queued.Load() == 0 && l.track.outstanding() == 0 }
	if l.o.drain <= 0 {
		return
	}
	deadline := time.NewTimer(l.o.drain)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for !done() {
		select {
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		case <-poll.C:
		}
	}
}

// closeAll sends DISCONNECT to every live device and closes the
// connections; it returns when every reader has ended.
func (l *loader) closeAll() {
	l.closing.Store(true)
	disc := packets.NewControlPacket(packets.Disconnect)
	var wg sync.WaitGroup
	ch := make(chan *device)
	for range min(len(l.devs), 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range ch {
				d.wmu.Lock()
				if d.alive.Load() {
					_ = d.writeLocked(disc) // the close below ends it either way
				}
				d.conn.Close()
				d.wmu.Unlock()
			}
		}()
	}
	for _, d := range l.devs {
		if d.conn != nil {
			ch <- d
		}
	}
	close(ch)
	wg.Wait()
	l.devWG.Wait()
}
