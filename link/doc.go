// Package link is the device end of the terminal WebSocket channel and the
// wire format both ends share.
//
// The frames are the ones of the Terminal WebSocket Channel spec
// (connect, connected, message, ack, ping, pong, error) plus the opt-in
// extensions of DESIGN.md (progress, cancel, connected.heartbeat_seconds).
// Decode is strict: every error says what is wrong (invalid JSON, missing
// type, unknown type, a missing or mistyped field) so the server can send
// it back in an error frame and keep the connection open. Encode writes the
// exact wire JSON, "type" first.
//
// Client is the device end of a session: it dials, connects with the
// device's peer_id, pings every heartbeat and redials with jittered
// exponential backoff forever. Every message goes to a durable Outbox
// (FileOutbox: append-only, fsynced) before it is sent and is resent with
// the same message_id on every reconnect until it is answered; replies
// reach the caller once per message_id.
package link
