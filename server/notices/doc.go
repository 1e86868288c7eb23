// Package notices owns the notice mailboxes of termserver's channels
// (server push to kiosks, issue 13): the durable per-peer mailboxes, the
// notice API's request parser and its HTTP routes (POST, GET and DELETE
// of /api/channels/{channel_id}[/peers/{peer_id}]/notices).
//
// A notice is addressed to one or more peers; each (notice, peer) pair is
// a delivery that is pending, sent (on the current or an earlier
// connection, not yet acked), acked, expired or withdrawn.
//
// The server uses the mailboxes through the Mailboxes interface: the
// device connection takes the notices due (Due, MarkSent) and acks them
// (Ack), the fleet's peer page shows them (Count, ForPeer), agents push
// (FromAgent), the composition opens, starts and closes them, and their
// Routes are the notice API. Everything it needs of the server (channel
// bounds, events, the push into a live connection, the peer directory,
// which channels exist) arrives in Options. The package imports no part
// of package server.
//
// # Rules once, storage twice
//
// Service is the one implementation of Mailboxes (and of Store, the
// API's methods): every rule is there once, the transitions, the bounds,
// expiry and pruning, the events (notice_created, notice_sent,
// notice_acked, notice_withdrawn, notice_expired) and the metrics
// (termlink_notices_created_total, _acked_total, _expired_total,
// _withdrawn_total, termlink_notices_pending, termlink_notice_mailboxes).
// It keeps its records in a Storage: a small key-value store with
// revisions and compare-and-set, which feeds the Service its load and,
// when shared, every other writer's changes. LocalStorage is the
// workspace's (below); package cluster's NoticeStorage is KV
// termlink_notices, shared by every node. The contract suite
// (noticestest) runs on both.
//
// The records: a notice (its content, never rewritten), one delivery per
// peer (its state, sent and acked times, the writer), and for a shared
// store one record per mailbox listing its open deliveries, which keeps
// the bound per peer across nodes. The Service holds the whole store in
// memory (its state) and answers the connections from it; its own
// writes are taken in as soon as the store holds them, other writers'
// through the feed (and pushed to the peer's connection, if this node
// holds it). An ack is read and written at the store: a device may ack
// on one node a notice another sent it.
//
// # Durability (the local store)
//
// workspace/notices/ holds a write-ahead log (package wal: group commit,
// one fdatasync for every record appended meanwhile, torn-tail repair)
// and records.snap. Every write (a notice, a delivery's change, a
// deletion) is appended to the log before it is answered, so the API
// answers (and the device is sent a notice) only after the notice is on
// disk, and kill -9 loses nothing that was answered. When enough has
// been logged, every record is written to records.snap (temporary file,
// fsync, rename, directory fsync), which records the last LSN it holds;
// the log is then released up to it. Open reads the snapshot and replays
// only the records after its LSN; each carries its revision, so a record
// is applied once even when the release mark was lost. The snapshot's
// records, written in revision order, feed the Service's first load as
// read while the store's index of them (a table of their keys' hashes)
// is built on a goroutine of its own (a read or write of the store waits
// for it); later writes go to a map beside them: a workspace of
// 500,000 deliveries opens in about the time the older store took
// (BenchmarkNoticesOpen). A workspace of the older store (an operation
// log and snapshot.json) is read once and rewritten by the first
// snapshot.
//
// "sent" is written behind (a writer of its own; Close writes what is
// queued): a sent notice that lost it is pending again after a restart,
// which it is for the device (it is resent on connect until acked).
// Expiry needs no record until the sweeper marks it: it follows from
// expires_at.
//
// # Bounds
//
// A peer holds at most maxNoticesPerPeer (channel config, default 100)
// open (pending or sent) notices: a create for a full mailbox is refused
// for that peer, never dropped silently. Finished deliveries (acked,
// withdrawn, expired) are kept for the API until their notice expires,
// at most as many per peer as the bound: when a record that makes more
// is applied (an ack, a withdrawal, an expiry, a create), the oldest go
// at once, from every node's state, and the writer deletes them from the
// store. An expired notice is kept KeepExpired longer, then forgotten (a
// shared store's records expire by their own TTL).
//
// Counters count what this process wrote: each delivery that was
// created, acked, withdrawn or expired is counted once in the cluster, by
// the node whose write landed (a concurrent writer that finds it
// finished counts nothing). The gauges are the state's: in a cluster,
// every node's.
package notices
