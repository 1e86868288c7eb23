// Package wschannel is the terminal WebSocket channel adapter of
// docs/channel.md: for one channel it upgrades
// GET /api/channels/{channel_id}/ws, owns each device connection (its
// reader, its writer and their queues, the connect handshake, message,
// cancel and ping frames, the per-peer rate, the close codes). Every
// other device frame (notice_ack, screen, update_status, settings_ack,
// diag_result) is routed (frames.go): each capability registers the frame
// types it takes in Deps.Frames, with the connect capability a device
// must have listed and whether the frame is paced, and the connection
// applies those rules the same way for each before it hands the frame
// over and sends replies, progress, notices and streamed reply
// text (delta frames, to a device that listed "stream": stream.go) down
// it.
//
// New builds a channel's adapter from what it uses, given at
// construction as small interfaces (Deps): the accept path (Accepter:
// the runtime's AcceptInbound, through the store of record), the store's
// Cancel (Records) and who is told that the connections came and went
// (Presence: the runtime's accept path, and a cluster's edge), the
// device registry (Registry), the
// notice mailboxes (Mailboxes), the channel's token
// bindings and client certificate auth (package identity), its event
// log, the adapters' Metrics (one set the server registers and shares)
// and a logger. It never calls a runner or a store's write path itself:
// a message goes to Accepter, a reply comes back through Adapter.Send.
//
// The server holds each channel's adapter as an Adapter: the
// the runtime's Send, /api/status's ConnectedPeers, Close at shutdown,
// ServeUpgrade for the route, ReplaceElsewhere and CloseDevices for a
// cluster edge, PushNotices for the mailboxes and ReloadClientAuth for
// the mutual TLS reload. The concrete type is the package's own.
//
// A connection's writer has one state (open, greeted, closing, closed;
// conn.go): replies, progress, notices and deltas are pushed into its queues,
// and it writes them in corked batches over a flushConn, whose write
// deadline bounds a stall, not a write (a device that reads slowly is
// never dropped, one that stopped reading is). StallListener gives a TLS
// listener's sockets the same meaning below the TLS layer. Readers' steps
// and writers run on warm pooled workers (stepper.go), not on goroutines
// started per frame or batch.
//
// An idle connection holds no goroutine, no read or write buffer and no
// *websocket.Conn (its box, the gorilla Conn with its 448-byte read
// buffer, goes back to a pool and the next wake or write takes one:
// box.go; over TLS the tls.Conn's empty input buffers and its exporter
// and resumption secrets are let go: poll.go): on Linux it waits in the adapter's readiness loop (package
// readiness: one epoll instance and one goroutine for every connection),
// which hands it to a stepper worker when its socket is readable; its
// idle, connect and close-grace deadlines are timers on one shared wheel,
// not read deadlines on the socket. Its socket is taken out of Go's own
// poller after the upgrade (readiness.Detach: the wrapper that held the
// net.TCPConn holds a readiness.Conn, a duplicated descriptor read and
// written without blocking, whose reads and writes that find it not
// ready wait through the loop, with their deadlines), so an idle
// connection keeps no netFD, addresses or runtime poll descriptor; a
// socket a tls.Conn holds directly stays as it is. Elsewhere (a build without epoll) or
// for a socket without a descriptor, a connection keeps a goroutine of
// its own that waits for data (serve), as before. Close stops the loop
// and the wheel once every connection has ended.
//
// Overload is met with backpressure before refusal: a message a full
// waiting bound refuses (a refusal that implements RoomWaiter, as
// router.BusyError does) is held while the connection stops reading the
// device, until a place is held for it or half a heartbeat has passed;
// only then is it answered busy.
//
// ConnGuard is the listener's side: it keeps open TCP connections
// within the descriptor budget (package fdbudget), shedding the
// connection idle or still in its headers the longest, or answering 503;
// termserver's Serve wraps its listener in it.
package wschannel
