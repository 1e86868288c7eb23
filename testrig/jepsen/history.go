package jepsen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Kind says what an Event records.
type Kind string

// The kinds of events a history holds.
const (
	// KindSend: the device queued a message (Client.Send).
	KindSend Kind = "send"
	// KindAck: the device got the server's ack of a message (the
	// message is stored: accepted). Only the first ack of a message is
	// recorded.
	KindAck Kind = "ack"
	// KindRefused: the server refused a message for now (code busy); the
	// client sends it again after a backoff.
	KindRefused Kind = "refused"
	// KindReply: the device got the final answer to a message (Text; Err
	// set when the answer is an error frame, or "finish_reason error: "
	// and its text for a reply whose finish_reason is error).
	KindReply Kind = "reply"
	// KindResend: a message sent before went out again, on a new
	// connection (every unanswered message is resent at each connect).
	KindResend Kind = "resend"
	// KindRunStart: the agent started a run of the message on Node.
	KindRunStart Kind = "run_start"
	// KindRunEnd: the agent finished a run of the message on Node.
	KindRunEnd Kind = "run_end"
	// KindInterrupted: the cluster's history records run_interrupted for
	// the message (a run cut short, which allows one second run).
	KindInterrupted Kind = "interrupted"
	// KindFaultStart and KindFaultEnd: the nemesis began or healed a
	// fault (Fault, on Node).
	KindFaultStart Kind = "fault_start"
	KindFaultEnd   Kind = "fault_end"
)

var kinds = map[Kind]bool{KindSend: true, KindAck: true, KindRefused: true, KindReply: true, KindResend: true,
	KindRunStart: true, KindRunEnd: true, KindInterrupted: true, KindFaultStart: true, KindFaultEnd: true}

// Fault names (Event.Fault, Fault.Kind).
const (
	FaultKillNATS   = "kill_nats"   // kill -9 of a NATS node, restarted at the fault's end
	FaultKillEdge   = "kill_edge"   // kill -9 of an edge, restarted at the end
	FaultKillWorker = "kill_worker" // kill -9 of a worker, restarted at the end
	FaultPause      = "pause"       // SIGSTOP of any node, SIGCONT at the end
	// FaultPartition: any node cut off from the cluster's network (its
	// veth moved off the bridge), put back at the end.
	FaultPartition = "partition"
	// FaultDiskFull: a NATS node's JetStream store (a size-limited tmpfs)
	// filled up, the filler removed at the end.
	FaultDiskFull = "disk_full"
)

var faultNames = map[string]bool{FaultKillNATS: true, FaultKillEdge: true, FaultKillWorker: true, FaultPause: true,
	FaultPartition: true, FaultDiskFull: true}

// Event is one line of a history.
type Event struct {
	Kind Kind  `json:"kind"`
	Time int64 `json:"t"` // wall time, Unix nanoseconds

	// Message events (every kind but the faults').
	Device  string `json:"device,omitempty"`
	Session string `json:"session,omitempty"` // the session's key (or id) as the device knows it
	Message string `json:"msg,omitempty"`     // message id
	Seq     int    `json:"seq,omitempty"`     // the message's number on its device, from 1
	Text    string `json:"text,omitempty"`    // send: the message's text; reply: the answer's
	Err     string `json:"err,omitempty"`     // reply: the error that answered the message

	// Node: run_start, run_end (the worker that ran it) and the faults
	// (the node it hit).
	Node  string `json:"node,omitempty"`
	Fault string `json:"fault,omitempty"` // fault_start, fault_end
	// Note: free text (a fault beyond what JetStream promises says so).
	Note string `json:"note,omitempty"`
}

// Validate reports what is missing or wrong in one event.
func (e Event) Validate() error {
	if !kinds[e.Kind] {
		return fmt.Errorf("unknown kind %q", e.Kind)
	}
	if e.Time <= 0 {
		return fmt.Errorf("%s: time %d: want a positive Unix time in ns", e.Kind, e.Time)
	}
	switch e.Kind {
	case KindFaultStart, KindFaultEnd:
		if !faultNames[e.Fault] {
			return fmt.Errorf("%s: unknown fault %q", e.Kind, e.Fault)
		}
		if e.Node == "" {
			return fmt.Errorf("%s %s: no node", e.Kind, e.Fault)
		}
		return nil
	}
	if e.Fault != "" {
		return fmt.Errorf("%s: a fault name (%q) on a message event", e.Kind, e.Fault)
	}
	if e.Message == "" {
		return fmt.Errorf("%s: no message id", e.Kind)
	}
	if e.Device == "" {
		return fmt.Errorf("%s %s: no device", e.Kind, e.Message)
	}
	if e.Seq < 0 {
		return fmt.Errorf("%s %s: negative seq %d", e.Kind, e.Message, e.Seq)
	}
	switch e.Kind {
	case KindSend:
		if e.Seq == 0 {
			return fmt.Errorf("send %s: no seq", e.Message)
		}
		if e.Text == "" {
			return fmt.Errorf("send %s: no text", e.Message)
		}
	case KindRunStart, KindRunEnd:
		if e.Node == "" {
			return fmt.Errorf("%s %s: no node", e.Kind, e.Message)
		}
	}
	return nil
}

// History is a run's events in the order they were recorded.
type History []Event

// Recorder appends events to a history, safe for concurrent use. With a
// writer, each event is also written as a JSON line at once.
type Recorder struct {
	mu  sync.Mutex
	h   History
	w   io.Writer
	err error
}

// NewRecorder returns a Recorder writing to w (nil: memory only).
func NewRecorder(w io.Writer) *Recorder { return &Recorder{w: w} }

// Add records e (its time is set to now's if zero, by the caller).
func (r *Recorder) Add(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h = append(r.h, e)
	if r.w != nil && r.err == nil {
		b, err := json.Marshal(e)
		if err == nil {
			b = append(b, '\n')
			_, err = r.w.Write(b)
		}
		r.err = err
	}
}

// History returns a copy of the events so far.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(History(nil), r.h...)
}

// Err is the first error writing the events.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// WriteHistory writes h as JSON lines, one event a line.
func WriteHistory(w io.Writer, h History) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, e := range h {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteHistoryFile writes h to path (created or truncated).
func WriteHistoryFile(path string, h History) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteHistory(f, h); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// maxLine bounds one line of a history.
const maxLine = 1 << 20

// ReadHistory parses JSON lines strictly: every line one JSON object with
// known fields only, nothing after it, each event valid (Event.Validate).
// Blank lines are errors too. An error names the line.
func ReadHistory(r io.Reader) (History, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var h History
	line := 0
	for sc.Scan() {
		line++
		e, err := parseEvent(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("history line %d: %w", line, err)
		}
		h = append(h, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("history line %d: longer than %d bytes", line+1, maxLine)
		}
		return nil, fmt.Errorf("history line %d: %w", line+1, err)
	}
	return h, nil
}

// ReadHistoryFile reads a history file (ReadHistory).
func ReadHistoryFile(path string) (History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

func parseEvent(b []byte) (Event, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return Event{}, errors.New("blank line")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e Event
	if err := dec.Decode(&e); err != nil {
		return Event{}, fmt.Errorf("not an event: %w", err)
	}
	if dec.More() {
		return Event{}, errors.New("more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return Event{}, errors.New("trailing data after the event")
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}
