package cluster

import "testing"

func delivery(session, id string, p int) *Delivery {
	return &Delivery{In: inbound(session, id), Partition: p}
}

func TestTicketsAddNumbersEachDelivery(t *testing.T) {
	t.Parallel()
	ts := NewTickets()
	d := delivery("s", "m", 0)
	in := d.In
	in.RunID = "r-1"
	tk, in := ts.Add(d, in)
	if tk == nil || in.Delivery == 0 || d.In.Delivery != in.Delivery || d.In.RunID != "r-1" {
		t.Fatalf("Add = %v, %+v; d.In %+v", tk, in, d.In)
	}
	if tk.Claim.State != StatePending || tk.Claim.RunID != "r-1" || tk.Claim.MessageID != "m" {
		t.Fatalf("new ticket's claim %+v", tk.Claim)
	}
	if again, _ := ts.Add(delivery("s", "m", 0), in); again != nil {
		t.Fatal("a second ticket for a message held")
	}
	if ts.Of(KeyOf(in), in.Delivery) != tk || ts.Of(KeyOf(in), in.Delivery+1) != nil {
		t.Fatal("Of does not tell the ticket's copy from another")
	}
	d2 := delivery("s", "m", 0)
	if !ts.Attach(KeyOf(in), d2) || ts.Delivery(tk) != d2 {
		t.Fatal("Attach did not give the ticket the new delivery")
	}
	if ts.Attach(Key{"s", "other"}, d2) {
		t.Fatal("Attach to a message not held")
	}
	ts.Forget(KeyOf(in), tk)
	if ts.Held(KeyOf(in)) != nil || ts.Len() != 0 {
		t.Fatal("Forget left the ticket")
	}
	tk2, in2 := ts.Add(delivery("s", "m", 0), in)
	if tk2 == nil || in2.Delivery <= in.Delivery {
		t.Fatalf("the next delivery's number %d is not above %d", in2.Delivery, in.Delivery)
	}
	ts.Forget(KeyOf(in), tk) // an old ticket: no effect
	if ts.Held(KeyOf(in)) != tk2 {
		t.Fatal("forgetting an old ticket dropped the new one")
	}
	if ts.SetState(KeyOf(in), tk, TicketStarting) {
		t.Fatal("SetState on a ticket no longer held")
	}
}

// A partition lost drops its queued tickets only: a ticket starting or
// running may have its claim written, and a later delivery must find it.
func TestTicketsLostKeepsStartedOnes(t *testing.T) {
	t.Parallel()
	ts := NewTickets()
	add := func(id string, p int) (*Ticket, Key) {
		d := delivery("s"+id, id, p)
		tk, in := ts.Add(d, d.In)
		return tk, KeyOf(in)
	}
	_, kq := add("q", 1)
	ks, kstart := add("st", 1)
	kr, krun := add("r", 1)
	_, kother := add("o", 2)
	if !ts.SetState(kstart, ks, TicketStarting) {
		t.Fatal("SetState on a held ticket")
	}
	ts.Running(kr)
	if ts.Unfinished(1) != 3 || ts.Unfinished(2) != 1 {
		t.Fatalf("unfinished %d, %d; want 3, 1", ts.Unfinished(1), ts.Unfinished(2))
	}
	ts.Lost(1)
	if ts.Held(kq) != nil {
		t.Fatal("a queued ticket of the lost partition is kept")
	}
	if ts.Held(kstart) == nil || ts.Held(krun) == nil || ts.Held(kother) == nil {
		t.Fatal("a starting or running ticket, or another partition's, was dropped")
	}
	if n := len(ts.Deliveries()); n != 3 {
		t.Fatalf("%d deliveries held; want 3", n)
	}
}
