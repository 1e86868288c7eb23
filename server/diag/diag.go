// Package diag is the server's side of logs and self-tests on demand
// (issue 28): an operator asks a connected device that listed "diag" for
// the end of its log or to run its self-checks, over the device's own
// session, and waits for the answer.
//
// Requests sends a link.Diag frame on the peer's live connection (its
// Send, the runtime's SendFleet) and waits for the link.DiagResult with
// the same request_id, which the channel adapter hands to Report (it is
// one of the server's fleet operation parts), or for the caller's
// context to end. Waiting is bounded: MaxPerPeer requests per device and
// MaxTotal in all; past them Request fails at once with ErrTooMany. A
// device is believed only about what it was asked (issue 36): a result
// nobody waits for (it came after its request gave up, names no request
// of that peer, or answers another kind) is refused (Report's error: the
// connection answers bad_frame), logged through the server's gate for
// what comes from outside, and dropped.
//
// API serves it over HTTP (http.go): GET .../peers/{peer_id}/logs and
// POST .../peers/{peer_id}/selftest, each an event on the channel.
//
// In a cluster (remote.go) a request this node's connections did not
// take goes, through Options.Remote, to the node whose edge holds the
// device, which runs it on its own connection (API.ServeRemote) with
// the same Requests and answers; the operator sees what one server
// shows.
package diag

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"termlink/link"
	"termlink/server/throttle"
)

// Bounds on the requests waiting for their answer (Options' defaults).
const (
	DefaultMaxPerPeer = 4
	DefaultMaxTotal   = 256
)

var (
	// ErrNotSent: the peer's connection on this server did not take the
	// request (not connected here, it did not list "diag", or its queue
	// of fleet frames is full).
	ErrNotSent = errors.New("diag: the device's connection did not take the request")
	// ErrTooMany: the bounds on waiting requests are reached.
	ErrTooMany = errors.New("diag: too many requests waiting")
)

// Options configure Requests.
type Options struct {
	// Send hands f to the peer's live connection; false when it did not
	// take it (Runtime.SendFleet).
	Send func(channelID, peerID string, f link.Frame) bool
	// MaxPerPeer and MaxTotal bound the requests waiting (0: the
	// defaults).
	MaxPerPeer, MaxTotal int
	Log                  *slog.Logger
	// Outside is the server's gate for what a device can make it write
	// (package throttle; nil: everything is written).
	Outside *throttle.Gate
	// Remote, in a cluster, reaches a device connected to another node
	// (remote.go): a request this node's connection did not take goes
	// there. Nil on a single server.
	Remote Remote
}

// Requests are the diag requests waiting for their device's answer. Safe
// for concurrent use.
type Requests struct {
	opt     Options
	mu      sync.Mutex
	waiting map[string]*waiter // by request id
	perPeer map[peerKey]int
}

type peerKey struct{ channel, peer string }

type waiter struct {
	key  peerKey
	kind string
	done chan *link.DiagResult // capacity 1
}

// New returns the requests of opt.
func New(opt Options) *Requests {
	if opt.MaxPerPeer <= 0 {
		opt.MaxPerPeer = DefaultMaxPerPeer
	}
	if opt.MaxTotal <= 0 {
		opt.MaxTotal = DefaultMaxTotal
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	return &Requests{opt: opt, waiting: map[string]*waiter{}, perPeer: map[peerKey]int{}}
}

// Request asks peer on channel for kind (link.DiagLogs with at most
// bytes of its log, or link.DiagSelftest) and waits for its answer until
// ctx ends (ctx's error, wrapped). The answer may carry the device's own
// Error. Errors: ErrTooMany, ErrNotSent, a bad kind or bytes; in a
// cluster (Options.Remote), when this node's connection did not take it,
// the node holding the device is asked: ErrNotConnected, ErrRemote, and
// the errors that node met.
func (r *Requests) Request(ctx context.Context, channelID, peerID, kind string, bytes int) (*link.DiagResult, error) {
	return r.request(ctx, channelID, peerID, kind, bytes, r.opt.Remote)
}

// request is Request, asking remote (nil: none) when this node's
// connection did not take it. The waiting place is held meanwhile: the
// bounds count the requests sent elsewhere too.
func (r *Requests) request(ctx context.Context, channelID, peerID, kind string, bytes int, remote Remote) (*link.DiagResult, error) {
	switch {
	case kind != link.DiagLogs && kind != link.DiagSelftest:
		return nil, fmt.Errorf("diag: kind %q: want %q or %q", kind, link.DiagLogs, link.DiagSelftest)
	case bytes < 0 || bytes > link.MaxDiagBytes:
		return nil, fmt.Errorf("diag: bytes must be from 0 to %d, got %d", link.MaxDiagBytes, bytes)
	}
	id, w, err := r.add(peerKey{channelID, peerID}, kind)
	if err != nil {
		return nil, err
	}
	defer r.remove(id)
	if !r.opt.Send(channelID, peerID, &link.Diag{RequestID: id, Kind: kind, Bytes: bytes}) {
		if remote == nil {
			return nil, ErrNotSent
		}
		return r.askRemote(ctx, remote, channelID, peerID, kind, bytes)
	}
	select {
	case res := <-w.done:
		return res, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("diag: no answer to %s request %s: %w", kind, id, context.Cause(ctx))
	}
}

// add registers a waiter within the bounds.
func (r *Requests) add(key peerKey, kind string) (string, *waiter, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := "diag-" + hex.EncodeToString(b[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.perPeer[key] >= r.opt.MaxPerPeer:
		return "", nil, fmt.Errorf("%w: %d for peer %s already (at most %d)", ErrTooMany, r.perPeer[key], key.peer, r.opt.MaxPerPeer)
	case len(r.waiting) >= r.opt.MaxTotal:
		return "", nil, fmt.Errorf("%w: %d on this server already (at most %d)", ErrTooMany, len(r.waiting), r.opt.MaxTotal)
	}
	w := &waiter{key: key, kind: kind, done: make(chan *link.DiagResult, 1)}
	r.waiting[id] = w
	r.perPeer[key]++
	return id, w, nil
}

func (r *Requests) remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.waiting[id]
	if w == nil {
		return
	}
	delete(r.waiting, id)
	if r.perPeer[w.key]--; r.perPeer[w.key] <= 0 {
		delete(r.perPeer, w.key)
	}
}

// Waiting is the number of requests waiting for their answer.
func (r *Requests) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiting)
}

// DeviceConnected (a fleet operation part): nothing to do, a request is
// sent only to a live connection.
func (r *Requests) DeviceConnected(string, *link.Connect) {}

// Answers is the answer frame the requests take: diag_result.
func (r *Requests) Answers() link.Type { return link.TypeDiagResult }

// gateRefused is the gate's kind for a result refused.
const gateRefused = "diag result refused"

// Report takes a diag_result: it completes the request it answers when
// that request was sent to that peer, asked for its kind, and still
// waits (believed); else it is refused with an error saying so, and
// logged (through Options.Outside).
func (r *Requests) Report(channelID, peerID string, f link.Frame) (believed bool, err error) {
	res, ok := f.(*link.DiagResult)
	if !ok {
		return false, fmt.Errorf("diag requests take diag_result frames, not %s", f.FrameType())
	}
	r.mu.Lock()
	w := r.waiting[res.RequestID]
	switch {
	case w == nil || w.key != (peerKey{channelID, peerID}):
		// One answer for both: whether another device was asked says
		// nothing a device needs to know.
		err = fmt.Errorf("request_id %q names no request waiting for this device's answer (it came too late, or answers nothing asked)", res.RequestID)
	case w.kind != res.Kind:
		err = fmt.Errorf("request %s asked for %s, not %q", res.RequestID, w.kind, res.Kind)
	default:
		delete(r.waiting, res.RequestID) // answered once
		if r.perPeer[w.key]--; r.perPeer[w.key] <= 0 {
			delete(r.perPeer, w.key)
		}
		w.done <- res
	}
	r.mu.Unlock()
	if err != nil {
		r.opt.Outside.Log(slog.LevelWarn, gateRefused, channelID+"/"+peerID, "diag result refused",
			"channel_id", channelID, "peer_id", peerID, "request_id", res.RequestID, "kind", res.Kind, "err", err)
		return false, err
	}
	return true, nil
}
