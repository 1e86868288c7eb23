// Package stdio is the base of the agents that run as one long-lived
// process per session and talk over its stdin and stdout (Nuum NDJSON,
// ACP JSON-RPC): what a process is and how it lives, apart from what it
// says.
//
// A Runner starts a session's process for its first message (Shell -c
// COMMAND or an exec, in its own process group, in a working directory,
// recorded in package procs so that it dies with the server), keeps it in
// a pool (package pool: at most MaxProcesses, the least recently used idle
// one makes room, one turn at a time), stops it after IdleTimeout without
// a turn, and restarts it after a crash with the backoff of package
// restart. A Proc owns the pipes and the goroutines every such process
// has: the stderr drain (the last lines quoted in error replies), the
// supervisor (idle stop, stop requests: interrupt the turn, close stdin,
// SIGTERM and SIGKILL the group after StopGrace each) and the waiter
// (reap, kill what the group left, release the pool's hold). Writes to
// stdin are serialized and bounded by WriteTimeout; an agent that does
// not read is killed.
//
// A protocol is a type that embeds *Proc and implements Protocol: it
// reads stdout (its own goroutine), says how a turn in progress is
// interrupted, and whether an exit was the agent quitting on its own
// (no crash). Its runner embeds *Runner and adds the opening (handshake)
// and the turn; everything else is here.
package stdio
