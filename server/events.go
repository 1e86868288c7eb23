package server

import "context"

// openEventFeed opens the backend's event feed for the runtime (none on
// a single server, or when NATS does not answer in time: the fleet API
// then shows this node's events, as a single server does, and says so
// in the log). Where the events are read: package runtime's EventFeed.
func (s *Server) openEventFeed(perChannel int) {
	f, err := s.backend.openEventFeed(context.Background(), perChannel)
	if err != nil {
		s.log.Warn("cluster: the events stream is not open; the API shows this node's events only", "err", err)
		return
	}
	if f != nil {
		s.rt.UseEventFeed(f)
	}
}
