// Package load is the load generator behind `termrig load`: it opens many
// simulated terminal devices against a terminal WebSocket channel and
// measures what the server does with them.
//
// # Two kinds of device
//
// Lean mode (the default) is for the server: every device speaks the real
// channel protocol with its own minimal code (link frames over
// gorilla/websocket): connect, wait for connected, ping every heartbeat,
// send user messages and match acks and assistant replies by message_id.
// N devices cost N reader goroutines and a few shared goroutines
// (scheduler, heartbeat, a small writer pool) — idle devices (Rate 0) are
// cheap enough for 10,000 connections from one process, which is how
// server memory per connection is measured. A lean device that loses its
// connection stays down (counted in Disconnected) until its next move, if
// moves are on.
//
// Client mode (Options.Client, `termrig load --client`) is for link.Client
// and the two ends together: every device is a real link.Client, as in
// termd, with a link.MemoryOutbox or (Options.Outbox "file") a
// link.FileOutbox in a temp state dir per device. Heartbeats, reconnect
// backoff and resending unanswered messages are the client's own; the
// report adds Reconnects and the clients' summed counters, and a reply
// delivered twice to the caller (DuplicateReplies) is a client bug. It
// costs about 4 times the memory of a lean device (about 55 KiB instead
// of 14 KiB per idle device, 6 goroutines instead of 1; see
// TestMeasureClientCost), so measure connection capacity in lean mode.
// A device whose first connect attempt fails is
// counted failed and closed, as in lean mode; after that the client
// reconnects by itself and messages sent meanwhile wait in its outbox.
//
// # Several servers and moves
//
// Options.URLs spreads the devices over several servers (the edges of a
// cluster): device i uses server i mod n. Options.Move makes every device
// hop to the next server every Move, staggered (one device every
// Move/Devices): a lean device's reader closes the connection, dials the
// next server with the same peer id and resends its unanswered messages
// with their message ids before anything new; a client-mode device's
// link.Client is closed and a new one started with the same outbox, which
// the runner owns for that reason. A reply that arrives in an ack's reply
// field counts as the reply; a second reply to a message id is a
// duplicate; a message still unanswered after the drain is lost.
//
// In both modes messages go at one total rate spread round-robin over the
// devices by a single shared scheduler, and Run returns a Report: connect
// successes, failures and their errors, connect latency (dial to
// connected), messages sent/acked/replied/lost, duplicates, error frames,
// throughput and round-trip and ack latency percentiles.
package load
