package server

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"termlink/link"
	fleetapi "termlink/server/fleet"
	"termlink/server/httpapi"
	"termlink/server/registry"
	"termlink/server/router"
	"termlink/server/runtime"
	"termlink/server/session"
	"termlink/server/wschannel"
)

// The fleet (issue 13): the device registry, fed by the channel adapters
// (package wschannel: connect, screen, disconnect, messages accepted),
// and the fleet API of package fleet (peers, events, live streams) on top
// of it.

// fleetOptions tune the fleet; tests shorten them.
type fleetOptions struct {
	flushInterval   time.Duration // registry write-behind; default registry.DefaultFlushInterval
	streamBuffer    int           // events a stream subscriber may fall behind; default 1024
	streamWrite     time.Duration // a stream write that makes no progress this long ends it; default 10 s
	streamKeepalive time.Duration // default 15 s
	helloPeers      int           // peers in the stream's hello; default 100
	maxStreams      int           // live event streams open at once, server-wide; default 64
	maxStreamsToken int           // live event streams one admin token holds at once; default 4
	maxPeers        int           // registry bounds per channel; 0: the registry's defaults
	maxAnonymous    int
}

type fleet struct {
	reg deviceRegistry
	api *fleetapi.API
}

// deviceRegistry is the device registry as the server uses it: the
// channel adapters feed it (wschannel.Registry), the fleet API reads it
// (fleetapi.Registry), the notices list a broadcast's peers in it (List)
// and tell it of their counts (Changed). One server's *registry.Registry
// or, in cluster mode, the cluster's (the node's registry for what its
// connections do, every node's devices for the reads: issue 25); the
// backend opens it (backend.go).
type deviceRegistry interface {
	wschannel.Registry
	fleetapi.Registry
	List(channelID string, f registry.Filter) []registry.Peer
	Changed(channelID, peerID string)
	SetUpdate(channelID, peerID string, u registry.UpdateState) bool
	SetBusy(channelID, peerID string, b registry.BusyState) bool
	SetSettings(channelID, peerID string, version int64, errText string) bool
	SetTags(channelID, peerID string, tags map[string]string) bool
	fleetapi.HealthSetter
	Close() error
}

var _ deviceRegistry = (*registry.Registry)(nil)

// openFleet opens the device registry and builds the fleet API on it,
// the channels, the session store, the router and the notice mailboxes:
// a capability. The backend opens the registry: the workspace's, or the
// cluster's.
func (s *Server) openFleet() (capability, error) {
	rt, opt, log := s.rt, s.opt.fleet, s.log
	dir := filepath.Join(s.cfg.Workspace, "registry")
	ropt := registry.Options{
		Logger: log, FlushInterval: opt.flushInterval, NoSync: s.opt.NoSync, MaxPeers: opt.maxPeers, MaxAnonymous: opt.maxAnonymous,
		NoticesPending: s.notices.Count, Gate: rt.Outside, // a device forgotten to make room: through the gate
	}
	reg, err := s.backend.openDevices(context.Background(), dir, ropt)
	if err != nil {
		return nil, fmt.Errorf("opening the device registry: %w", err)
	}
	chs := make([]fleetapi.Channel, 0, len(rt.Order))
	for _, id := range rt.Order {
		ch := rt.Channels[id]
		chs = append(chs, fleetapi.Channel{ID: id, AccountID: ch.Config.AccountID, Events: rt.EventView(id, ch.Events)})
	}
	api := fleetapi.New(fleetapi.Deps{
		Registry: reg, Channels: chs, SessionKey: runtime.SessionKey, Runs: routerRuns{s.router}, Notices: s.notices,
		History: func(key string, n int) ([]session.Record, error) {
			sess, err := rt.Sessions.Tail(key, n)
			if err != nil {
				return nil, err
			}
			return sess.Records, nil
		},
		Questions: func(channelID, peerID, base string) []link.Question {
			return openQuestions(rt, s.router, channelID, peerID, base)
		},
		Metrics: &rt.Metrics.Reg, Log: log, HealthTagKeys: s.cfg.Metrics.HealthTagKeys,
	}, fleetapi.Options{StreamBuffer: opt.streamBuffer, StreamWrite: opt.streamWrite, StreamKeepalive: opt.streamKeepalive,
		HelloPeers: opt.helloPeers, MaxStreams: opt.maxStreams, MaxStreamsPerToken: opt.maxStreamsToken})
	s.fleet = &fleet{reg: reg, api: api}
	return s.fleet, nil
}

// Routes registers the fleet API's routes: events, the live stream,
// peers, cancel (package fleet).
func (fl *fleet) Routes(mux httpapi.Mux) { fl.api.Routes(mux) }

// stopStreams ends the live streams and refuses new ones.
func (fl *fleet) stopStreams() { fl.api.StopStreams() }

// Close ends the streams, waits for them, and writes the registry.
func (fl *fleet) Close() error {
	fl.api.Close()
	return fl.reg.Close()
}

// routerRuns is the router as the fleet API's Runs.
type routerRuns struct{ r *router.Router }

func (rr routerRuns) PeerRuns(base string) []fleetapi.Run {
	var out []fleetapi.Run
	for _, run := range rr.r.PeerRuns(base) {
		out = append(out, fleetapi.Run{Session: run.Session, MessageID: run.MessageID})
	}
	return out
}
func (rr routerRuns) PeerSessions(base string) []string     { return rr.r.PeerSessions(base) }
func (rr routerRuns) Cancel(session, messageID string) bool { return rr.r.Cancel(session, messageID) }

// openQuestions are the questions open on a peer's device as this node
// knows them: those its connection here was sent (the adapter's, with
// the time the device has left), then those the runs here asked (the
// router's; in a cluster the run may be on another node), by id.
func openQuestions(rt *runtime.Runtime, r *router.Router, channelID, peerID, base string) []link.Question {
	var out []link.Question
	seen := map[string]bool{}
	if a, ok := rt.Channels.Adapter(channelID).(interface {
		OpenQuestions(peerID string) []link.Question
	}); ok {
		for _, q := range a.OpenQuestions(peerID) {
			seen[q.QuestionID] = true
			out = append(out, q)
		}
	}
	for _, q := range r.OpenQuestions(base) {
		if !seen[q.QuestionID] {
			out = append(out, q)
		}
	}
	return out
}
