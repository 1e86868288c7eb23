package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// Logs and self-tests across the cluster (issue 39): the node an operator
// asks finds the edge holding the device (the presence, as SendOut does)
// and asks it over core NATS, request/reply on diagPrefix+edge; the edge
// runs the request against its own connection and answers. This is the
// transport only: what a request and an answer say, and their rules, are
// package diag's (the server's backend wires the two). Both are bytes,
// bounded here (DiagOptions) and decoded strictly by diag.

// diagPrefix + an edge's name is the subject of the diag requests it
// answers.
const diagPrefix = "termlink.diag."

// The transport's answers instead of an edge's.
var (
	// ErrNoEdge: no edge holds the peer (the presence has none).
	ErrNoEdge = errors.New("cluster: no edge holds the peer")
	// ErrHeldHere: this node's edge holds the peer (the caller's own
	// connection is the one to ask).
	ErrHeldHere = errors.New("cluster: this node holds the peer")
	// ErrEdgeBusy: the edge serves DiagOptions.MaxServing requests
	// already.
	ErrEdgeBusy = errors.New("cluster: the edge serves too many diag requests")
)

// diagRefusedHeader, on an answer, is the transport's refusal (the body
// is empty): diagBusy, diagStopping.
const (
	diagRefusedHeader = "Termlink-Diag-Refused"
	diagBusy          = "busy"
	diagStopping      = "stopping" // the edge is shutting down
)

// DiagOptions bound the diag requests and answers.
type DiagOptions struct {
	MaxRequest int // bytes of a request: longer is not sent
	MaxAnswer  int // bytes of an answer: longer is refused
	// MaxServing bounds the requests an edge serves at once; past it one
	// is answered ErrEdgeBusy at once.
	MaxServing int
}

// edgeOf is the edge that holds the peer, "" for none: the presence
// mirror when this node keeps one (MirrorPresence), else (or when the
// mirror has no entry) a read of the bucket.
func (n *Node) edgeOf(ctx context.Context, channel, peer string) (string, error) {
	if edge, ok := n.mirror.Load().lookup(presenceKey(channel, peer)); ok {
		return edge, nil
	}
	return n.Presence(ctx, channel, peer)
}

// AskDiag sends req to the edge that holds the peer and returns its name
// and answer, waiting until ctx ends at the latest (opTimeout when ctx has
// no deadline). Errors: ErrNoEdge, ErrHeldHere, ErrEdgeBusy, a request or
// answer past opt's bounds, the edge not answering (NATS' no responders:
// it is gone, or not an edge), ctx's error.
func (n *Node) AskDiag(ctx context.Context, channel, peer string, req []byte, opt DiagOptions) (string, []byte, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if len(req) > opt.MaxRequest {
		return "", nil, fmt.Errorf("cluster: a diag request of %d bytes, more than %d", len(req), opt.MaxRequest)
	}
	edge, err := n.edgeOf(ctx, channel, peer)
	switch {
	case err != nil:
		return "", nil, err
	case edge == "":
		return "", nil, ErrNoEdge
	case edge == n.cfg.Name:
		return edge, nil, ErrHeldHere
	}
	msg, err := n.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: diagPrefix + edge, Data: req})
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return edge, nil, fmt.Errorf("cluster: edge %s does not answer diag requests (it stopped, or is no edge)", edge)
	case err != nil:
		return edge, nil, fmt.Errorf("cluster: asking edge %s: %w", edge, err)
	case msg.Header.Get(diagRefusedHeader) == diagBusy:
		return edge, nil, fmt.Errorf("%w (edge %s)", ErrEdgeBusy, edge)
	case msg.Header.Get(diagRefusedHeader) != "":
		return edge, nil, fmt.Errorf("cluster: edge %s refused the diag request: %.64q", edge, msg.Header.Get(diagRefusedHeader)) // diagStopping
	case len(msg.Data) > opt.MaxAnswer:
		return edge, nil, fmt.Errorf("cluster: edge %s answered %d bytes, more than %d", edge, len(msg.Data), opt.MaxAnswer)
	}
	return edge, msg.Data, nil
}

// diagServer is an edge's side: the requests it serves, each on a
// goroutine it owns, until Node.Close.
type diagServer struct {
	ctx    context.Context // ended by stop
	cancel context.CancelFunc
	max    int
	sub    *nats.Subscription

	mu      sync.Mutex
	stopped bool
	serving int
	wg      sync.WaitGroup
}

// ServeDiag answers the diag requests sent to this edge with serve, each
// on its own goroutine (at most opt.MaxServing at once; past it ErrEdgeBusy
// at once), until Close, which ends serve's ctx and waits for them. A
// request past opt.MaxRequest is handed on too: serve's decoder says what
// is wrong with it. Call it once.
func (n *Node) ServeDiag(serve func(ctx context.Context, req []byte) []byte, opt DiagOptions) error {
	d := &diagServer{max: max(opt.MaxServing, 1)}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	sub, err := n.nc.Subscribe(diagPrefix+n.cfg.Name, func(msg *nats.Msg) {
		if msg.Reply == "" {
			return // nobody to answer
		}
		if refused := d.take(); refused != "" {
			_ = msg.RespondMsg(&nats.Msg{Subject: msg.Reply, Header: nats.Header{diagRefusedHeader: []string{refused}}})
			return
		}
		go func() {
			defer d.done()
			_ = msg.Respond(serve(d.ctx, msg.Data))
		}()
	})
	if err != nil {
		d.cancel()
		return fmt.Errorf("cluster: subscribing to %s: %w", diagPrefix+n.cfg.Name, err)
	}
	// Requests are small (opt.MaxRequest); what NATS holds for a slow
	// subscriber is bounded, and dropped past it (the asker times out).
	_ = sub.SetPendingLimits(4096, 4096*max(opt.MaxRequest, 1))
	d.sub = sub
	n.mu.Lock()
	if n.diag != nil {
		n.mu.Unlock()
		_ = sub.Unsubscribe()
		d.cancel()
		return errors.New("cluster: ServeDiag called twice")
	}
	n.diag = d
	n.mu.Unlock()
	return nil
}

// take reserves a place for a request: "" when it did, else why not
// (diagBusy, diagStopping).
func (d *diagServer) take() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.stopped:
		return diagStopping
	case d.serving >= d.max:
		return diagBusy
	}
	d.serving++
	d.wg.Add(1)
	return ""
}

func (d *diagServer) done() {
	d.mu.Lock()
	d.serving--
	d.mu.Unlock()
	d.wg.Done()
}

// stop takes no more requests, ends the ones served (their answers go
// out) and waits for them.
func (d *diagServer) stop() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	_ = d.sub.Unsubscribe()
	d.cancel()
	d.wg.Wait()
}

// Serving is the number of diag requests this edge serves now (tests).
func (n *Node) Serving() int {
	n.mu.Lock()
	d := n.diag
	n.mu.Unlock()
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.serving
}
