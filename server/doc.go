// Package server is termserver put together: the terminal WebSocket
// channel of docs/channel.md, the router that
// hands each message to its agent, and the HTTP API, composed around one
// store of record (package record).
//
// One message takes one path (DESIGN.md; server/README.md has the map):
//
//	terminal adapter -> runtime.Runtime.AcceptInbound -> record.Store.Accept
//	  (dedupe, durable record, the ack, the run queue)
//	-> router (one FIFO per session, bounded parallelism)
//	  -> record.Store.Start (the claim) -> agent.Runner
//	  -> record.Store.Finish (the reply recorded before it is sent)
//	-> record.Store.Deliver -> the terminal adapter's Send (never blocks)
//
// The adapter never calls a runner, and the runtime never asks which
// store it has: backend.go picks the backend once — record/local's (the
// workspace's write-ahead log and session files) or, in cluster mode,
// cluster's (JetStream) — and that backend opens the store of record and
// every other store; it is the only place that knows.
package server
