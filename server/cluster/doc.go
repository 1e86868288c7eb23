// Package cluster is termserver's store and transport when several
// termservers share one NATS JetStream cluster (the config's "cluster"
// block). It knows NATS, not the channel: package server calls it.
//
// One message's path across nodes:
//
//	edge: claim in KV termlink_dedupe (create-only) -> publish to stream
//	      TERMLINK_IN, subject termlink.in.<partition> (Nats-Msg-Id: the
//	      claim key) -> JetStream's ack -> ack to the device
//	worker owning the partition: durable consumer p<N> -> claim read ->
//	      run (claim CAS pending -> running) -> history records in stream
//	      TERMLINK_HIST -> claim CAS running -> done with the reply ->
//	      core publish termlink.out.<edge of the peer> -> ack the message
//	edge: reply to the device if it is still waiting for it
//
// Presence (KV termlink_presence) says which edge holds a peer; live nodes
// (KV termlink_nodes) and partition leases (KV termlink_parts) expire
// unless renewed, so a killed worker's partitions move after one lease.
// The new owner recreates the partition's consumer at its ack floor, so
// the messages of a session come again in stream order.
package cluster
