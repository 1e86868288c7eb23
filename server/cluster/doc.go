// Package cluster is termserver's store and transport when several
// termservers share one NATS JetStream cluster (the config's "cluster"
// block). It knows NATS, not the channel: Store is the store of record
// (record.Store) package server builds in cluster mode, in place of
// record/local's; the runtime and the router call it through that
// interface only, and Store reaches the server through Host.
//
// One message's path across nodes (two replicated writes):
//
//	edge: claim read (direct get) from stream TERMLINK_HIST, subject
//	      termlink.hist.<session>.<key> (a resend is answered from it)
//	      -> publish to stream TERMLINK_IN, subject
//	      termlink.in.<partition> (Nats-Msg-Id: the key) -> JetStream's
//	      ack -> ack to the device
//	worker owning the partition: its consumer p<N>_<id> -> run (no
//	      write: past the partition's fence, Claimer.Start) -> the
//	      claim created done with the reply and the turn's records
//	      (create-only) -> core publish termlink.out.<edge of the peer>
//	      (its presence mirror) -> ack the message
//	edge: reply to the device if it is still waiting for it
//
// A message an earlier owner of its partition may have started reads its
// claim first, is claimed running (compare-and-set) and recorded as
// interrupted (partitions.go: the fence and suspect sequences).
//
// Presence (KV termlink_presence) says which edge holds a peer; live nodes
// (KV termlink_nodes) and partition leases (KV termlink_parts) expire
// unless renewed, so a killed worker's partitions move after one lease.
// The new owner makes a consumer of its own at the earlier consumers' ack
// floor and deletes them, so the messages of a session come again in
// stream order and the old owner can no longer pull them (DESIGN.md).
//
// Every node watches its own link to NATS (edgewatch.go): an edge NATS
// has not answered for longer than a lease closes its device
// connections (close 1013) and refuses new ones until NATS answers, so
// its devices move to another edge.
//
// A worker checks the consumers of its partitions (heal.go) and deletes
// and recreates one that is gone, has no leader or delivers nothing while
// messages wait; Status lists each owned partition, stuck or not. The
// history stream's retention (age and bytes, retention.go) is set at
// every Open; export-sessions (ExportSessions) is the archive path.
//
// The claim's state machine is pure (claim.go): DecideStart,
// AfterStartWrite, DecideFinishConflict, DecideAccept and DecideCancel
// say what to do from the claim read and the last write's result. A
// worker's Claimer (worker.go) does the reads and writes they name for
// the deliveries its Tickets hold; an edge's Waits (edge.go) is its book
// of messages acked and not answered yet. Package server's cluster glue
// runs the messages and talks to the devices.
//
// Device identity is shared too (bindings.go, codes.go): Bindings
// (identity.Bindings, KV termlink_bindings) and Codes (identity.Codes, KV
// termlink_codes and termlink_codes_dropped) decide by package identity's
// rules and write with compare-and-set; the server opens them on the
// store's Node (server/identity.go).
//
// So is the device registry (devices.go): Devices keeps the edge's own
// registry (package registry) for what its connections do and publishes
// each changed peer, written behind, to KV termlink_devices; every node
// mirrors the bucket (registry.View) for the reads, and shows a peer
// online only while the edge run that published it beats
// (server/fleet.go opens it).
//
// So is the notice store (notices.go): NoticeStorage (notices.Storage,
// KV termlink_notices) keeps each notice, each delivery under its
// channel, peer and notice id, and each mailbox's open deliveries;
// every node follows the bucket through a watch into package notices'
// Service, which holds every rule, and the edge that holds a peer pushes
// its notices (server/notices.go opens them).
package cluster
