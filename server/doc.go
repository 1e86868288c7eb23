// Package server is termserver: the terminal WebSocket channel of
// shared/spec/terminal-websocket-channel.md and the runtime around it.
//
// One message takes one path (DESIGN.md):
//
//	terminal adapter -> Runtime.AcceptInbound (session id, dedupe, session log, events)
//	-> bus inbound -> router (one FIFO per session, bounded parallelism) -> agent.Runner
//	-> session log + dedupe -> bus outbound -> dispatcher -> terminal adapter send
//
// The adapter never calls a runner. A reply is written to the session log
// before it is sent, so the dedupe table rebuilt from the log at start-up
// answers a resent message with its cached reply instead of a second run;
// a message that was accepted but never answered (the server died) is run
// again at start-up.
//
// "Written to the session log" means: made durable in the workspace's
// write-ahead log (workspace/wal, package wal: one fdatasync per batch for
// every session), then written to the session file without fsync. One
// syncfs a second makes the files durable and releases the log; at
// start-up the records the files lack are replayed into them before the
// dedupe table is rebuilt (journal.go).
package server
