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
// (FromAgent), the composition opens, starts and closes them. Local is
// its implementation on the workspace's disk; everything it needs of the
// server (channel bounds, events, the push into a live connection, the
// peer directory, which channels exist) arrives in Options at Open. The
// package imports no part of package server.
//
// The HTTP routes (API) take the operator's methods through Store
// (Create, Withdraw, List, ListPeer): Local is one Store, the cluster's
// mailboxes (package cluster, KV termlink_notices) another, and both
// answer the same requests with the same bodies.
//
// # Durability
//
// workspace/notices/ holds a write-ahead log (package wal: group commit,
// one fdatasync for every record appended meanwhile, torn-tail repair)
// and snapshot.json. Creating a notice, an ack and a withdrawal are each
// appended to the log and applied in memory only once the log holds them,
// so the API answers (and the device is sent a notice) only after the
// notice is on disk, and kill -9 loses nothing that was answered. When
// enough has been logged, the whole state is written to snapshot.json
// (temporary file, fsync, rename, directory fsync), which records the last
// LSN it holds; the log is then released up to it. Open reads the
// snapshot and replays only the records after its LSN, so a record is
// applied once even when the release mark was lost.
//
// "sent" is not logged: after a restart a sent notice is pending again,
// which it is for the device (it is resent on connect until acked).
// Expiry needs no record either: it follows from expires_at.
//
// # Bounds
//
// A peer holds at most maxNoticesPerPeer (channel config, default 100)
// open (pending or sent) notices: a create for a full mailbox is refused
// for that peer, never dropped silently. Finished deliveries (acked,
// withdrawn) are kept for the API until their notice expires, at most as
// many per peer as open ones (the oldest go first); an expired notice is
// kept KeepExpired longer, then pruned.
package notices
