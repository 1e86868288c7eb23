package server

import (
	"context"

	"termlink/server/events"
	fleetapi "termlink/server/fleet"
)

// Where a channel's events are read (issue 25): every node keeps its own
// log of each channel (events.Log: what this node saw); in cluster mode
// each node also publishes its events to the cluster's events stream
// (the backend's event feed), and the fleet API (GET .../events, the
// live stream, the console) reads the cluster's view, every node's
// events, each naming its node. The backend (backend.go) says which.

// eventFeed is where a node publishes its channels' events and reads
// every node's back; nil on a single server.
type eventFeed interface {
	Publish(channelID string, e events.Event)
	View(channelID string, local *events.Log) fleetapi.EventLog
	// Dropped is how many events did not reach the feed.
	Dropped() uint64
}

// openEventFeed opens the backend's event feed (none on a single server,
// or when NATS does not answer in time: the fleet API then shows this
// node's events, as a single server does, and says so in the log).
func (rt *Runtime) openEventFeed(perChannel int) {
	f, err := rt.backend.openEventFeed(context.Background(), perChannel)
	if err != nil {
		rt.log.Warn("cluster: the events stream is not open; the API shows this node's events only", "err", err)
		return
	}
	if f == nil {
		return
	}
	rt.eventFeed = f
	rt.metrics.reg.NewCounterFunc("termlink_cluster_events_dropped_total",
		"Channel events this node could not publish to the cluster's events stream (its own log has them).",
		func() float64 { return float64(f.Dropped()) })
}

// newEventLog is channel id's own event log, published to the cluster's
// stream in cluster mode.
func (rt *Runtime) newEventLog(id string, size int) *events.Log {
	if rt.eventFeed == nil {
		return events.NewLog(size)
	}
	feed := rt.eventFeed
	return events.NewLogWith(size, events.DefaultMaxBytes, func(e events.Event) { feed.Publish(id, e) })
}

// eventView is what the fleet API reads of channel id's events: the
// cluster's in cluster mode, else this node's own log.
func (rt *Runtime) eventView(id string, local *events.Log) fleetapi.EventLog {
	if rt.eventFeed == nil {
		return local
	}
	return rt.eventFeed.View(id, local)
}
