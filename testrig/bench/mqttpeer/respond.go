package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// respondOptions configure the responder.
type respondOptions struct {
	broker string // host:port
	conns  int    // client connections sharing the subscription
	group  string // shared subscription group
}

func parseRespond(args []string) (respondOptions, error) {
	fs := flag.NewFlagSet("respond", flag.ContinueOnError)
	var o respondOptions
	fs.StringVar(&o.broker, "broker", "", "the MQTT broker, host:port")
	fs.IntVar(&o.conns, "conns", 1, "client connections; more than one share the subscription ($share/GROUP/dev/+/req)")
	fs.StringVar(&o.group, "group", "responders", "the shared subscription's group")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.broker == "":
		return o, errors.New("respond: --broker is required")
	case o.conns < 1 || o.conns > 64:
		return o, fmt.Errorf("respond: --conns %d: want 1 to 64", o.conns)
	}
	return o, nil
}

// filter is the topic filter the responder subscribes to.
func (o respondOptions) filter() string {
	if o.conns == 1 {
		return requestFilter
	}
	return "$share/" + o.group + "/" + requestFilter
}

// reply is one answer waiting to be published.
type reply struct {
	topic   string
	payload []byte
}

// replyQueue is an unbounded queue between paho's message handler, which
// must not block (its router goroutine also carries the PUBACKs that
// complete the publishes), and the goroutine that publishes the replies.
type replyQueue struct {
	mu     sync.Mutex
	q      []reply
	notify chan struct{} // cap 1: something was pushed
}

func newReplyQueue() *replyQueue { return &replyQueue{notify: make(chan struct{}, 1)} }

func (q *replyQueue) push(r reply) {
	q.mu.Lock()
	q.q = append(q.q, r)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// take waits for replies (or ctx) and returns all that are queued; buf is
// the slice take returned last time, for reuse.
func (q *replyQueue) take(ctx context.Context, buf []reply) ([]reply, error) {
	for {
		q.mu.Lock()
		if len(q.q) > 0 {
			out := q.q
			q.q = buf[:0]
			q.mu.Unlock()
			return out, nil
		}
		q.mu.Unlock()
		select {
		case <-q.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// responder counts what the responder did.
type responder struct {
	log            *slog.Logger
	answered, bad  atomic.Int64
	publishErrs    atomic.Int64
	lastBadLogNano atomic.Int64
}

// handle answers one request: the reply is queued for q's publisher.
func (r *responder) handle(q *replyQueue, topic string, payload []byte) {
	t, p, err := answer(nil, topic, payload)
	if err != nil {
		r.bad.Add(1)
		// At most one line a second: a stranger's junk must not flood the log.
		now := time.Now().UnixNano()
		if last := r.lastBadLogNano.Load(); now-last >= int64(time.Second) && r.lastBadLogNano.CompareAndSwap(last, now) {
			r.log.Warn("request not answered", "err", err, "bad so far", r.bad.Load())
		}
		return
	}
	q.push(reply{t, p})
}

// respond connects o.conns paho clients to the broker, subscribes them to
// every device's request topic at QoS 1 and answers each request on its
// device's reply topic at QoS 1 until ctx ends or a connection is lost.
// ready is called once every client is subscribed.
func respond(ctx context.Context, o respondOptions, log *slog.Logger, ready func()) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := &responder{log: log}
	var wg sync.WaitGroup
	defer wg.Wait()
	var clients []mqtt.Client
	defer func() {
		for _, c := range clients {
			c.Disconnect(250)
		}
	}()
	for i := range o.conns {
		q := newReplyQueue()
		opts := mqtt.NewClientOptions().
			AddBroker("tcp://" + o.broker).
			SetClientID(fmt.Sprintf("responder-%d", i)).
			SetCleanSession(true).
			SetKeepAlive(30 * time.Second).
			SetAutoReconnect(false).
			SetOrderMatters(true).
			SetConnectionLostHandler(func(_ mqtt.Client, err error) {
				cancel(fmt.Errorf("responder-%d: connection lost: %w", i, err))
			})
		c := mqtt.NewClient(opts)
		if err := wait(ctx, c.Connect()); err != nil {
			return fmt.Errorf("responder-%d: connect to %s: %w", i, o.broker, err)
		}
		clients = append(clients, c)
		wg.Add(2)
		tokens := make(chan mqtt.Token, 4096)
		go func() {
			defer wg.Done()
			defer close(tokens)
			r.publish(ctx, c, q, tokens)
		}()
		go func() {
			defer wg.Done()
			for t := range tokens {
				if err := wait(ctx, t); err != nil && ctx.Err() == nil {
					r.publishErrs.Add(1)
					log.Warn("publishing a reply", "err", err)
				}
			}
		}()
		sub := c.Subscribe(o.filter(), 1, func(_ mqtt.Client, m mqtt.Message) {
			r.handle(q, m.Topic(), m.Payload())
		})
		if err := wait(ctx, sub); err != nil {
			return fmt.Errorf("responder-%d: subscribe %s: %w", i, o.filter(), err)
		}
		if st, ok := sub.(*mqtt.SubscribeToken); ok {
			for f, code := range st.Result() {
				if code > 2 {
					return fmt.Errorf("responder-%d: subscribe %s refused (code %#x)", i, f, code)
				}
			}
		}
	}
	log.Info("responder ready", "broker", o.broker, "conns", o.conns, "filter", o.filter())
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	log.Info("responder stopping", "answered", r.answered.Load(), "bad requests", r.bad.Load(), "publish errors", r.publishErrs.Load())
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// publish publishes q's replies on c until ctx ends; each publish's
// token goes to tokens, whose reader waits for the PUBACK.
func (r *responder) publish(ctx context.Context, c mqtt.Client, q *replyQueue, tokens chan<- mqtt.Token) {
	var buf []reply
	for {
		batch, err := q.take(ctx, buf)
		if err != nil {
			return
		}
		for i, rp := range batch {
			t := c.Publish(rp.topic, 1, false, rp.payload)
			r.answered.Add(1)
			batch[i] = reply{}
			select {
			case tokens <- t:
			case <-ctx.Done():
				return
			}
		}
		buf = batch
	}
}

// wait waits for t or ctx.
func wait(ctx context.Context, t mqtt.Token) error {
	select {
	case <-t.Done():
		return t.Error()
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// discardLogger is for tests.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
