package cluster

import (
	"sync"

	"termlink/server/bus"
	"termlink/server/session"
)

// TicketState is where a delivery a worker holds is.
type TicketState uint8

const (
	TicketQueued   TicketState = iota // in the router's queue
	TicketStarting                    // its start may be writing its claim
	TicketRunning                     // started here: its claim says so
)

// Ticket is a delivery a worker holds: queued, starting or running. Its
// delivery and state change under the Tickets' lock; the exported
// fields belong to the goroutine that runs the ticket's copy.
type Ticket struct {
	d     *Delivery
	gen   uint64 // the Delivery of the router copy this ticket is for
	state TicketState

	Claim  Claim
	Rev    uint64           // the claim's revision as this worker last wrote or read it
	Recs   []session.Record // the turn's records before the reply
	Cached bool             // answered before: the claim has the reply
}

// Tickets are a worker's deliveries held until answered, by message.
// Safe for concurrent use.
type Tickets struct {
	mu      sync.Mutex
	tickets map[Key]*Ticket
	nextGen uint64 // the last ticket's gen
}

// NewTickets makes an empty table.
func NewTickets() *Tickets { return &Tickets{tickets: map[Key]*Ticket{}} }

// Len is the number of deliveries held.
func (ts *Tickets) Len() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.tickets)
}

// Attach gives the ticket held for k the delivery d, if there is one:
// JetStream sent the message again while this worker holds it. The
// copy already queued or running answers it.
func (ts *Tickets) Attach(k Key, d *Delivery) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.tickets[k]
	if t != nil {
		t.d = d
	}
	return t != nil
}

// Add holds d, queued, for its copy in (d's message, with its run id):
// it numbers the copy (in.Delivery, the ticket's gen) and d.In becomes
// in. nil if the message has a ticket already.
func (ts *Tickets) Add(d *Delivery, in bus.Inbound) (*Ticket, bus.Inbound) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	k := KeyOf(in)
	if ts.tickets[k] != nil {
		return nil, in
	}
	ts.nextGen++
	in.Delivery = ts.nextGen
	d.In = in
	t := &Ticket{d: d, gen: in.Delivery, Claim: Claim{State: StatePending, Session: in.SessionKey,
		MessageID: in.MessageID, RunID: in.RunID}}
	ts.tickets[k] = t
	return t, in
}

// Of is the ticket of the copy of k numbered gen: nil for a copy left
// queued from an earlier delivery (its ticket was dropped when the
// partition moved, and a later delivery has its own ticket and copy).
func (ts *Tickets) Of(k Key, gen uint64) *Ticket {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.tickets[k]; t != nil && t.gen == gen {
		return t
	}
	return nil
}

// Held is the ticket held for k, nil for none.
func (ts *Tickets) Held(k Key) *Ticket {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.tickets[k]
}

// Forget drops t, if it is still k's ticket.
func (ts *Tickets) Forget(k Key, t *Ticket) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tickets[k] == t {
		delete(ts.tickets, k)
	}
}

// Delivery is t's current delivery.
func (ts *Tickets) Delivery(t *Ticket) *Delivery {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return t.d
}

// SetState changes t's state if t is still k's ticket; false if not.
func (ts *Tickets) SetState(k Key, t *Ticket, s TicketState) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tickets[k] != t {
		return false
	}
	t.state = s
	return true
}

// Running marks t running.
func (ts *Tickets) Running(t *Ticket) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t.state = TicketRunning
}

// Deliveries lists the deliveries held.
func (ts *Tickets) Deliveries() []*Delivery {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ds := make([]*Delivery, 0, len(ts.tickets))
	for _, t := range ts.tickets {
		ds = append(ds, t.d)
	}
	return ds
}

// Unfinished counts the deliveries held of partition p.
func (ts *Tickets) Unfinished(p int) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0
	for _, t := range ts.tickets {
		if t.d.Partition == p {
			n++
		}
	}
	return n
}

// Lost drops the queued tickets of a partition this worker no longer
// owns: their copies are not run, and a later delivery (this worker
// took the partition again) queues copies of its own, in stream order.
// A ticket starting or running is kept: its claim may say it runs here,
// and a later delivery must find it rather than run it a second time as
// "this worker's own write".
func (ts *Tickets) Lost(p int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for k, t := range ts.tickets {
		if t.d.Partition == p && t.state == TicketQueued {
			delete(ts.tickets, k)
		}
	}
}
