// Package cluster starts the pieces of a termlink cluster on loopback for
// tests and for `termrig cluster`: an N-node JetStream cluster of the real
// nats-server (github.com/nats-io/nats-server/v2 at go.mod's version, in
// this process as a library, or as processes of the binary
// BuildNATSServer builds once per version) and termserver nodes (edges
// and workers) as processes (StartServer) or in this process (Rig).
//
// Every node listens on 127.0.0.1 (or, as a process, on an address of a
// network namespace it runs in: NATSOptions.Netns, NodeSpec.Netns) on
// ports picked free by the harness,
// keeps its files (config, store, workspace, log) under a directory the
// caller gives, and can be stopped (SIGTERM), killed (SIGKILL) and
// restarted with the same ports and files. Every wait is bounded by a
// context; a node that does not come up is named in the error with the
// tail of its log. StartNATSForTest and StartServerForTest tie them to a
// test: stopped at its end, their logs' tails printed when it failed.
package cluster
