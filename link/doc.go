// Package link is the device end of the terminal WebSocket channel and the
// wire format both ends share.
//
// The frames are the ones of the Terminal WebSocket Channel spec
// (connect, connected, message, ack, ping, pong, error) plus the opt-in
// extensions of DESIGN.md (progress, cancel, connected.heartbeat_seconds,
// notice, screen, delta).
// Decode is strict: every error says what is wrong (invalid JSON, missing
// type, unknown type, a missing or mistyped field) so the server can send
// it back in an error frame and keep the connection open. Encode writes the
// exact wire JSON, "type" first.
//
// Client is the device end of a session: it dials, connects with the
// device's peer_id, pings every heartbeat and redials with jittered
// exponential backoff forever. Every message goes to a durable Outbox
// (FileOutbox: append-only, fsynced) before it is sent and is resent with
// the same message_id on every reconnect until it is answered.
//
// The delivery contract on the device:
//   - "Delivered" is decided by the consumer. A final answer (a reply, or a
//     refusal for good) reaches the caller once per message_id as an Event
//     with Final set; the message stays in the outbox until the caller has
//     handled it and calls Client.Delivered. Unconfirmed at exit (SIGTERM,
//     crash), it is resent at the next start and the server's dedupe
//     answers it from its cache, shown once.
//   - An error frame of code "busy" is never a final answer: the message
//     stays in the outbox and is resent after a jittered, growing backoff
//     on the same connection, ahead of the messages not sent yet (one
//     already in flight behind it may be taken first).
//   - Nothing queues without bound: at most Window messages are in flight
//     or awaiting confirmation, and the events not yet read are coalesced
//     (progress per message and the link state: latest wins) and capped.
//   - Streamed text (ClientConfig.Stream, capability "stream") is never
//     a final answer: EventDelta carries all of a message's text so far
//     (accumulated per connection, seq checked, bounded by
//     MaxStreamBytes); the final reply supersedes it and is what the
//     caller confirms.
//   - A state dir that cannot be written does not stop the client: the
//     FallbackOutbox keeps messages in memory (Status.Storage,
//     EventStorage) and stores them once the disk works again.
package link
