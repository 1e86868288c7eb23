// Package chaos is the fault-injecting TCP proxy behind `termrig chaos`.
//
// A Proxy listens on one address and forwards every connection to a target
// address, byte for byte, until it is told to misbehave:
//
//   - latency: every chunk of bytes is delivered D later than it arrived
//     (each direction, order kept);
//   - stall: sockets stay open but nothing passes in either direction (the
//     bytes are held, and flow again when the stall ends), as on a network
//     path that went silent without a FIN or RST — a half-open link;
//   - refuse: new connections are reset at once; open ones are untouched;
//   - cut: every open connection is reset now (an action, not a mode);
//   - down: cut, then refuse — the server seems to be gone.
//
// Modes are switched in code (SetMode, SetLatency, Cut, Apply), by a
// Schedule ("5s:cut,10s:stall,15s:normal", optionally repeated), or through
// the small HTTP control API of Handler:
//
//	GET  /status                 mode, latency and counters as JSON
//	POST /mode?m=stall           any action: normal, stall, refuse, down, cut, latency=200ms
//	POST /cut                    cut every open connection
//	POST /latency?d=200ms        set the latency (0 for none)
//
// Tests use it in-process: New(Options{Target: addr}) listens on a free
// loopback port; Addr says where.
package chaos
