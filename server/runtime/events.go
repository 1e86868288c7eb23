package runtime

import (
	"termlink/server/events"
	fleetapi "termlink/server/fleet"
)

// Where a channel's events are read (issue 25): every node keeps its own
// log of each channel (events.Log: what this node saw); in cluster mode
// each node also publishes its events to the cluster's events stream
// (the backend's event feed), and the fleet API (GET .../events, the
// live stream, the console) reads the cluster's view, every node's
// events, each naming its node. The root's backend says which.

// EventFeed is where a node publishes its channels' events and reads
// every node's back; none on a single server.
type EventFeed interface {
	Publish(channelID string, e events.Event)
	View(channelID string, local *events.Log) fleetapi.EventLog
	// Dropped is how many events did not reach the feed.
	Dropped() uint64
}

// UseEventFeed publishes the channels' events made from now on to f
// (NewEventLog), and counts those it dropped.
func (rt *Runtime) UseEventFeed(f EventFeed) {
	rt.eventFeed = f
	rt.Metrics.Reg.NewCounterFunc("termlink_cluster_events_dropped_total",
		"Channel events this node could not publish to the cluster's events stream (its own log has them).",
		func() float64 { return float64(f.Dropped()) })
}

// EventFeed is the feed the channels' events go to: nil on a single
// server.
func (rt *Runtime) EventFeed() EventFeed { return rt.eventFeed }

// NewEventLog is channel id's own event log, published to the cluster's
// stream in cluster mode.
func (rt *Runtime) NewEventLog(id string, size int) *events.Log {
	if rt.eventFeed == nil {
		return events.NewLog(size)
	}
	feed := rt.eventFeed
	return events.NewLogWith(size, events.DefaultMaxBytes, func(e events.Event) { feed.Publish(id, e) })
}

// EventView is what the fleet API reads of channel id's events: the
// cluster's in cluster mode, else this node's own log.
func (rt *Runtime) EventView(id string, local *events.Log) fleetapi.EventLog {
	if rt.eventFeed == nil {
		return local
	}
	return rt.eventFeed.View(id, local)
}
