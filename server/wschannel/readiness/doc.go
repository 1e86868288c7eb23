// Package readiness is what lets an idle connection cost no goroutine:
// a Poller (Linux: one epoll instance and one goroutine, its loop) calls
// a connection's function when its socket has something to read, once
// per Arm (EPOLLONESHOT); a Wheel (one goroutine for any number of
// timers) calls a timer's function once its deadline has passed, to a
// tick's precision.
//
// Detach moves a TCP socket out of Go's own poller into a Poller: the
// Conn it returns reads and writes the descriptor without blocking and
// waits (Handle.Wait, a parked goroutine) for readiness and its
// deadlines, as a net.Conn does.
//
// Both are owned by their creator, which stops them with Close or Stop:
// each then waits for its goroutine to return.
//
// On systems without epoll, NewPoller reports ErrUnsupported and the
// caller keeps a goroutine per connection (the fallback).
package readiness
