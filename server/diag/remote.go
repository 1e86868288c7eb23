package diag

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"termlink/link"
)

// Logs and self-tests across a cluster (issue 39): a request made on a
// node whose channel adapter does not hold the device goes, through the
// backend's Remote, to the node whose edge does (the cluster's presence),
// which runs it against its own connection (API.ServeRemote: the same
// Requests, bounds and waits) and answers with the device's diag_result
// or the outcome that stood in for it. The rules stay here: the cluster
// carries bytes, bounded (MaxRemoteRequestBytes, MaxRemoteAnswerBytes),
// and both ends decode them strictly (decodeRemoteRequest,
// decodeRemoteAnswer; fuzzed).

// Remote reaches the node holding a device's connection (the backend's
// transport in a cluster; nil on a single server).
type Remote interface {
	// Ask hands req to the node whose edge holds peerID's connection on
	// channelID and returns that node's name and answer, when ctx ends at
	// the latest (then ctx's error). Errors: ErrNotConnected (no node
	// holds it), ErrNotSent (this node does), ErrTooMany (that node
	// serves too many requests already), else the transport's.
	Ask(ctx context.Context, channelID, peerID string, req []byte) (node string, answer []byte, err error)
}

var (
	// ErrNotConnected: no node of the cluster holds the device's
	// connection.
	ErrNotConnected = errors.New("diag: no node holds the device's connection")
	// ErrRemote: the node holding the device did not answer, refused the
	// request, or answered something that is not an answer.
	ErrRemote = errors.New("diag: the node holding the device")
)

// Bounds on what crosses the cluster.
const (
	// MaxRemoteRequestBytes bounds a request (its ids are a channel's and
	// a peer's, MaxRemoteIDBytes each).
	MaxRemoteRequestBytes = 4 << 10
	// MaxRemoteIDBytes bounds the channel and peer ids of a request.
	MaxRemoteIDBytes = 256
	// maxRemoteDetailBytes bounds an answer's detail (an error's words).
	maxRemoteDetailBytes = 1024
	// maxRemoteWait bounds the wait a request asks for (the edge waits
	// at most its own timeout for the kind anyway).
	maxRemoteWait = 10 * time.Minute
)

// MaxRemoteAnswerBytes bounds an answer: the biggest diag_result a device
// may send (link.DiagReadLimit, every character escaped) and the
// envelope.
var MaxRemoteAnswerBytes = int(link.DiagReadLimit) + 4<<10

// remoteRequest is a request on its way to the node holding the device.
type remoteRequest struct {
	Channel string `json:"channel"`
	Peer    string `json:"peer"`
	Kind    string `json:"kind"`
	Bytes   int    `json:"bytes,omitempty"`
	// WaitMS is how long the asker waits, in milliseconds: the edge waits
	// no longer (nor longer than its own timeout for the kind).
	WaitMS int64 `json:"wait_ms"`
}

// Outcomes of a remote request (remoteAnswer.Outcome).
const (
	outAnswered = "answered" // Result is the device's diag_result
	outNotSent  = "not_sent" // the connection there did not take it (ErrNotSent)
	outTooMany  = "too_many" // the bounds there are reached (ErrTooMany)
	outGone     = "gone"     // the connection there went away
	outTimeout  = "timeout"  // no answer within the wait
	outRefused  = "refused"  // the request was bad, or the edge is shutting down (Detail)
)

// remoteAnswer is the edge's answer.
type remoteAnswer struct {
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	// Result is the device's diag_result frame, in link's encoding
	// (decoded, and its bounds checked, by link.Decode).
	Result json.RawMessage `json:"result,omitempty"`
}

func encodeRemoteRequest(q remoteRequest) ([]byte, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	return json.Marshal(q)
}

// decodeRemoteRequest reads a request that came off the wire.
func decodeRemoteRequest(data []byte) (remoteRequest, error) {
	var q remoteRequest
	if len(data) > MaxRemoteRequestBytes {
		return q, fmt.Errorf("diag request is %d bytes, more than %d", len(data), MaxRemoteRequestBytes)
	}
	if err := json.Unmarshal(data, &q); err != nil {
		return remoteRequest{}, fmt.Errorf("diag request is not JSON: %w", err)
	}
	if err := q.check(); err != nil {
		return remoteRequest{}, err
	}
	return q, nil
}

func (q remoteRequest) check() error {
	switch {
	case q.Channel == "" || len(q.Channel) > MaxRemoteIDBytes || !utf8.ValidString(q.Channel):
		return fmt.Errorf("diag request: channel must be 1 to %d bytes of UTF-8", MaxRemoteIDBytes)
	case q.Peer == "" || len(q.Peer) > MaxRemoteIDBytes || !utf8.ValidString(q.Peer):
		return fmt.Errorf("diag request: peer must be 1 to %d bytes of UTF-8", MaxRemoteIDBytes)
	case q.Kind != link.DiagLogs && q.Kind != link.DiagSelftest:
		return fmt.Errorf("diag request: kind must be %q or %q", link.DiagLogs, link.DiagSelftest)
	case q.Bytes < 0 || q.Bytes > link.MaxDiagBytes:
		return fmt.Errorf("diag request: bytes must be from 0 to %d, got %d", link.MaxDiagBytes, q.Bytes)
	case q.WaitMS < 1 || q.WaitMS > maxRemoteWait.Milliseconds():
		return fmt.Errorf("diag request: wait_ms must be from 1 to %d, got %d", maxRemoteWait.Milliseconds(), q.WaitMS)
	}
	return nil
}

// encodeRemoteAnswer encodes an answer; res is set for outAnswered.
func encodeRemoteAnswer(outcome, detail string, res *link.DiagResult) []byte {
	a := remoteAnswer{Outcome: outcome, Detail: cut(detail, maxRemoteDetailBytes)}
	if res != nil {
		b, err := link.Encode(res)
		if err != nil { // a result Report took was decoded by link: not reached
			a = remoteAnswer{Outcome: outRefused, Detail: cut("the device's result does not encode: "+err.Error(), maxRemoteDetailBytes)}
		} else {
			a.Result = b
		}
	}
	b, _ := json.Marshal(a)
	return b
}

// decodeRemoteAnswer reads an answer that came off the wire to a request
// for kind: the result for outAnswered (a diag_result of that kind, in
// link's bounds), else the outcome and its detail.
func decodeRemoteAnswer(data []byte, kind string) (remoteAnswer, *link.DiagResult, error) {
	var a remoteAnswer
	if len(data) > MaxRemoteAnswerBytes {
		return a, nil, fmt.Errorf("the answer is %d bytes, more than %d", len(data), MaxRemoteAnswerBytes)
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return remoteAnswer{}, nil, fmt.Errorf("the answer is not JSON: %w", err)
	}
	if len(a.Detail) > maxRemoteDetailBytes || !utf8.ValidString(a.Detail) {
		return remoteAnswer{}, nil, fmt.Errorf("the answer's detail is not at most %d bytes of UTF-8", maxRemoteDetailBytes)
	}
	switch a.Outcome {
	case outAnswered:
	case outNotSent, outTooMany, outGone, outTimeout, outRefused:
		if len(a.Result) != 0 && string(a.Result) != "null" {
			return remoteAnswer{}, nil, fmt.Errorf("the answer %q carries a result", a.Outcome)
		}
		return a, nil, nil
	default:
		return remoteAnswer{}, nil, fmt.Errorf("the answer's outcome %q is none known", cut(a.Outcome, 40))
	}
	if len(a.Result) == 0 {
		return remoteAnswer{}, nil, errors.New("the answer has no result")
	}
	f, err := link.Decode(a.Result)
	if err != nil {
		return remoteAnswer{}, nil, fmt.Errorf("the answer's result: %w", err)
	}
	res, ok := f.(*link.DiagResult)
	switch {
	case !ok:
		return remoteAnswer{}, nil, fmt.Errorf("the answer's result is a %s frame, not diag_result", f.FrameType())
	case res.Kind != kind:
		return remoteAnswer{}, nil, fmt.Errorf("the answer's result is of kind %q, not %q", res.Kind, kind)
	}
	return a, res, nil
}

// askRemote asks the node holding the device (this node's connection did
// not take the request). The wait it asks for is ctx's deadline, else
// the kind's timeout.
func (r *Requests) askRemote(ctx context.Context, remote Remote, channelID, peerID, kind string, bytes int) (*link.DiagResult, error) {
	wait := defaultTimeout(kind)
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d)
	}
	wait = min(max(wait, time.Millisecond), maxRemoteWait)
	req, err := encodeRemoteRequest(remoteRequest{Channel: channelID, Peer: peerID, Kind: kind, Bytes: bytes, WaitMS: wait.Milliseconds()})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRemote, err)
	}
	node, data, err := remote.Ask(ctx, channelID, peerID, req)
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("diag: no answer to %s request from node %s: %w", kind, node, context.Cause(ctx))
	case errors.Is(err, ErrNotConnected), errors.Is(err, ErrNotSent), errors.Is(err, ErrTooMany):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w %s did not answer: %v", ErrRemote, orUnknownNode(node), err)
	}
	a, res, err := decodeRemoteAnswer(data, kind)
	if err != nil {
		r.opt.Outside.Log(slog.LevelWarn, gateBadAnswer, "node "+node, "diag: a bad answer from the node holding the device",
			"node", node, "channel_id", channelID, "peer_id", peerID, "err", err)
		return nil, fmt.Errorf("%w %s answered badly: %v", ErrRemote, orUnknownNode(node), err)
	}
	switch a.Outcome {
	case outAnswered:
		return res, nil
	case outNotSent:
		return nil, fmt.Errorf("%w (node %s: %s)", ErrNotSent, node, a.Detail)
	case outTooMany:
		return nil, fmt.Errorf("%w on node %s: %s", ErrTooMany, node, a.Detail)
	case outGone:
		return nil, fmt.Errorf("diag: node %s: %w", node, errGone)
	case outTimeout:
		return nil, fmt.Errorf("diag: node %s: %w", node, errTimeout)
	default: // outRefused
		return nil, fmt.Errorf("%w %s refused the request: %s", ErrRemote, orUnknownNode(node), a.Detail)
	}
}

// The gate's kinds: a remote request refused (its source: "cluster"), a
// remote answer refused (its source: the node).
const (
	gateRemoteRefused = "diag remote request refused"
	gateBadAnswer     = "diag remote answer refused"
)

// ServeRemote answers a request another node sent to this one, whose
// edge holds the device (Remote.Ask's other end): it runs it against the
// local connection only (never on to another node), waiting at most the
// request's wait and this API's timeout for the kind, and answers with
// the device's diag_result or the outcome instead. A bad request is
// answered "refused", saying why, and logged through the gate. ctx ends
// the wait (the node's shutdown).
func (a *API) ServeRemote(ctx context.Context, data []byte) []byte {
	q, err := decodeRemoteRequest(data)
	if err == nil && !a.host.Channel(q.Channel) {
		err = fmt.Errorf("no channel %q on this node", cut(q.Channel, 100))
	}
	if err != nil {
		a.r.opt.Outside.Log(slog.LevelWarn, gateRemoteRefused, "cluster", "diag: a request from another node refused", "err", err)
		return encodeRemoteAnswer(outRefused, err.Error(), nil)
	}
	wait := min(time.Duration(q.WaitMS)*time.Millisecond, a.timeout(q.Kind))
	ctx, cancel := context.WithTimeoutCause(ctx, wait, errTimeout)
	defer cancel()
	res, err := a.r.request(ctx, q.Channel, q.Peer, q.Kind, q.Bytes, nil)
	switch {
	case err == nil:
		return encodeRemoteAnswer(outAnswered, "", res)
	case errors.Is(err, ErrNotSent):
		return encodeRemoteAnswer(outNotSent, "its connection here did not take the request", nil)
	case errors.Is(err, ErrTooMany):
		return encodeRemoteAnswer(outTooMany, err.Error(), nil)
	case errors.Is(err, errTimeout):
		return encodeRemoteAnswer(outTimeout, err.Error(), nil)
	case errors.Is(err, errGone):
		return encodeRemoteAnswer(outGone, err.Error(), nil)
	default: // this node is shutting down
		return encodeRemoteAnswer(outRefused, err.Error(), nil)
	}
}

func (a *API) timeout(kind string) time.Duration {
	if kind == link.DiagSelftest {
		return a.SelftestTimeout
	}
	return a.LogsTimeout
}

func defaultTimeout(kind string) time.Duration {
	if kind == link.DiagSelftest {
		return SelftestTimeout
	}
	return LogsTimeout
}

func orUnknownNode(node string) string {
	if node == "" {
		return "(unknown)"
	}
	return node
}

// cut cuts s to at most n bytes on a character boundary.
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
