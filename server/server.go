package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/procs"
	"termlink/server/agent/runners"
	"termlink/server/bus"
	"termlink/server/config"
	"termlink/server/events"
	"termlink/server/fdbudget"
	fleetapi "termlink/server/fleet"
	"termlink/server/fleetops"
	"termlink/server/guard"
	"termlink/server/httpapi"
	"termlink/server/httpserve"
	"termlink/server/identity"
	"termlink/server/notices"
	"termlink/server/releases"
	"termlink/server/rollout"
	"termlink/server/router"
	"termlink/server/runtime"
	"termlink/server/session"
	"termlink/server/tlsconf"
	"termlink/server/wal"
	"termlink/server/wschannel"
)

// Options tune a Server beyond its config.
type Options struct {
	Logger *slog.Logger
	// Runners replaces the runner built from config for an agent name.
	Runners map[string]agent.Runner
	// NoSync skips fsync of the write-ahead log and the session files (benchmarks only).
	NoSync bool
	// EventsPerChannel bounds each channel's event log (default 1000).
	EventsPerChannel int
	// DedupePerSession bounds the message ids remembered per session
	// (default 1024); a device resends only recent, unanswered ones.
	DedupePerSession int

	fleet fleetOptions // tests shorten the fleet's periods
	// writeStall replaces the adapters' write timeout (10 s; tests).
	writeStall time.Duration

	// fds replaces the descriptor budget read from RLIMIT_NOFILE (tests).
	fds *fdbudget.Budget

	// session adds test hooks to the session store's options, wal to the
	// write-ahead log's.
	session session.Options
	wal     wal.Options

	// claimHook runs at each start of a cluster worker's message and
	// before each claim write of a start (tests); an error stands for
	// NATS trouble there (a leader election).
	claimHook func(in bus.Inbound) error

	// diagTimeout replaces the diag API's timeouts, logs and self-test
	// (tests).
	diagTimeout time.Duration
}

// defaultHTTPLimits are what Serve uses (tests shorten them).
var defaultHTTPLimits = httpserve.DefaultLimits

// maxDeviceBody bounds a device's write body as the guard reads it
// (enrollment's few fields; its routes refuse past their own).
const maxDeviceBody = 64 << 10

// Server is termserver: runtime, router, adapters and the HTTP API.
type Server struct {
	cfg     *config.Config
	opt     Options
	log     *slog.Logger
	rt      *runtime.Runtime // the message path (package runtime)
	router  *router.Router
	procs   *procs.Registry  // agent process groups and their sentinel
	fds     *fdbudget.Budget // the process's file descriptors: sockets, session files, agents
	guard   *guard.Guard     // the operator guard (Host, Origin, admin tokens, the body policy)
	routeMx *httpapi.RouteMux
	mux     http.Handler // the routes behind the guard
	started time.Time

	recovered []bus.Inbound

	// caps are the capabilities, in the order New opened them; closers
	// closes, newest first, what New opened: when New fails, or at
	// Shutdown.
	caps    []capability
	closers closeStack

	stopBg context.CancelFunc
	bgWG   sync.WaitGroup
	once   sync.Once

	backend  backend           // local or cluster, chosen once; opens every store (backend.go)
	notices  notices.Mailboxes // the notice mailboxes (package notices; notices.go wires them)
	fleet    *fleet            // device registry and the fleet API (fleet.go, package fleet)
	fleetOps *fleetops.Ops     // fleet operations' side of the device connections (package fleetops)
	tls      *tlsconf.TLS      // nil: plain HTTP
	ident    *identity.Service // device identity: bindings and enrollment routes (identity.go)
	releases *releases.Store   // signed termd releases (releases.go)
	rollouts *rollout.Manager  // staged rollouts of releases (rollouts.go)
}

// A capability is a part of the server with routes of its own (the
// notices, the fleet, identity, the settings, diag, the releases and
// their downloads, the rollouts). New opens each in turn (a later one
// may use an earlier one), before the channels' adapters are built;
// what has a Close is closed by the closer stack; its routes are
// registered in the same order; one with a Start starts when New ends.
type capability interface {
	Routes(mux httpapi.Mux)
}

// New opens the workspace's write-ahead log (replaying what the session
// files lack) and session log, rebuilds the dedupe table from it
// and builds the channels' adapters and agents. Start begins the work.
func New(cfg *config.Config, opt Options) (_ *Server, err error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	if opt.EventsPerChannel <= 0 {
		opt.EventsPerChannel = 1000
	}
	if opt.DedupePerSession <= 0 {
		opt.DedupePerSession = 1024
	}
	if abs, err := filepath.Abs(cfg.Workspace); err == nil {
		c := *cfg
		c.Workspace = abs // agents get absolute paths in their envelopes
		cfg = &c
	}
	s := &Server{cfg: cfg, opt: opt, log: log, started: time.Now()}
	defer func() {
		if err != nil {
			_ = s.closers.unwind()
		}
	}()
	if s.tls, err = tlsconf.Load(cfg, log); err != nil {
		return nil, err
	}
	maxRuns := cfg.MaxConcurrentRuns
	if maxRuns <= 0 {
		maxRuns = 256
	}
	maxWaiting := cfg.MaxWaitingRuns
	if maxWaiting <= 0 {
		maxWaiting = config.DefaultMaxWaitingRuns
	}
	dedupeBytes := cfg.DedupeCacheBytes
	if dedupeBytes <= 0 {
		dedupeBytes = config.DefaultDedupeCacheBytes
	}
	if s.procs, err = procs.Open(cfg.Workspace, log); err != nil { // agents left by a crashed predecessor die first
		return nil, err
	}
	_, _ = s.procs.Reap()
	s.closers.push(func() error { s.procs.Close(); return nil }) // last: its sentinel kills any agent group a runner left
	// One budget of file descriptors (fdbudget): the session store, the
	// agents and the connection guard (Serve) each take their share.
	if s.fds = opt.fds; s.fds == nil {
		s.fds = fdbudget.FromProcess()
	}
	fds := s.fds
	s.procs.SetFDs(fds.Pool(fdbudget.Agents))
	log.Info("file descriptor budget", "limit", fds.Limit(), "sockets_max", fds.Max(fdbudget.Sockets),
		"session_files_max", fds.Max(fdbudget.Files), "agents_kept", fds.Floor(fdbudget.Agents)/fdbudget.PerAgent)
	sopt := opt.session
	sopt.NoSync, sopt.SyncLater, sopt.WriteBehind, sopt.Logger = opt.NoSync, true, true, log
	sopt.FDs = fds.Pool(fdbudget.Files)
	store, err := session.Open(filepath.Join(cfg.Workspace, "sessions"), sopt)
	if err != nil {
		return nil, fmt.Errorf("opening the session log: %w", err)
	}
	s.closers.push(store.Close)
	rt := runtime.New(log, store, maxWaiting)
	s.rt = rt
	s.closers.push(func() error { rt.Outside.Close(); return nil })
	if s.backend, rt.Records, err = openBackend(rt, log, cfg, opt, dedupeBytes); err != nil {
		return nil, err
	}
	s.closers.push(rt.Records.Close)
	rt.Records.Metrics(&rt.Metrics.Reg)
	fds.Export(&rt.Metrics.Reg)
	s.tls.Metrics(&rt.Metrics.Reg)
	s.openEventFeed(opt.EventsPerChannel) // cluster mode: the channels' events go to the cluster's stream (events.go)

	built := map[string]agent.Runner{}
	s.closers.push(func() error {
		for _, r := range built {
			_ = r.Close()
		}
		return nil
	})
	byChannel := map[string]agent.Runner{}
	for id, chCfg := range cfg.Channels {
		ch := &runtime.Channel{ID: id, Config: chCfg, Events: rt.NewEventLog(id, opt.EventsPerChannel)}
		rt.Channels[id] = ch
		rt.Order = append(rt.Order, id)
		if !chCfg.Enabled {
			continue
		}
		r := built[chCfg.Agent]
		if r == nil {
			if r = opt.Runners[chCfg.Agent]; r == nil {
				r, err = runners.New(chCfg.Agent, cfg.Agents[chCfg.Agent], runners.Options{Workspace: cfg.Workspace, Procs: s.procs, Push: s.pushFromAgent, Logger: log})
				if err != nil {
					return nil, fmt.Errorf("channels.%s.agent: %w", id, err)
				}
			}
			built[chCfg.Agent] = r
		}
		byChannel[id] = r
	}
	sort.Strings(rt.Order)
	s.router = router.New(rt, rt.Admission, byChannel, cfg.Workspace, maxRuns)
	rt.Router = s.router
	if rec := rt.Records.Recoverer; rec != nil {
		if s.recovered, err = rec.Recover(context.Background()); err != nil {
			return nil, err
		}
	}
	s.fleetOps = &fleetops.Ops{} // its parts are the capabilities that take a device's answers
	for _, open := range []func() (capability, error){
		s.openNotices, s.openFleet, s.openIdentity, s.openSettings, s.openDiag, s.openReleases, s.openDownloads,
		func() (capability, error) { return rolloutsCap{s}, s.openRollouts(opt.NoSync) },
	} {
		c, err := open()
		if err != nil {
			return nil, err
		}
		s.caps = append(s.caps, c)
		if cl, ok := c.(interface{ Close() error }); ok {
			s.closers.push(cl.Close)
		}
	}
	for _, ch := range rt.Channels { // after the capabilities they feed
		if ch.Config.Enabled {
			ch.Adapter = wschannel.New(ch.ID, ch.Config, wschannel.Deps{
				Accept: rt, Records: rt.Records, Presence: rt.Presence(), Registry: s.fleet.reg, Notices: s.notices,
				Bindings: ch.Bindings, ClientAuth: s.tls.Client(ch.ID), Events: ch.Events,
				SessionKey: runtime.SessionKey, Metrics: &rt.Metrics.WS, Log: log, Fleet: s.fleetOps, Outside: rt.Outside,
				Frames: slices.Concat(notices.AckFrames(s.notices), fleetapi.ScreenFrames(s.fleet.reg), fleetapi.HealthFrames(s.fleet.reg), wschannel.FleetFrames(s.fleetOps.Report)),
			}, wschannel.Options{WriteStall: opt.writeStall})
		}
	}
	for _, c := range s.caps {
		if st, ok := c.(interface{ Start() }); ok {
			st.Start()
		}
	}
	s.routeMx = httpapi.NewRouteMux() // each route declares its class as it is registered; the guard reads them
	s.guard = guard.New(guard.Options{Admin: cfg.Admin, Listen: cfg.Listen, DeviceRoute: s.routeMx.Is(httpapi.DeviceRoute),
		RawBodyRoute: s.routeMx.Is(httpapi.RawBodyRoute), MaxOperatorBody: notices.MaxBodyBytes, MaxDeviceBody: maxDeviceBody, Log: log})
	s.mux = s.routes()
	return s, nil
}

// rolloutsCap is the rollouts (rollouts.go) as a capability.
type rolloutsCap struct{ s *Server }

func (r rolloutsCap) Routes(mux httpapi.Mux) { r.s.rollouts.Routes(mux) }
func (r rolloutsCap) Close() error           { return r.s.closeRollouts() }

// closeStack is what New opened, to close newest first when it fails or
// at Shutdown (one place, not a cleanup repeated after each step).
type closeStack []func() error

func (c *closeStack) push(f func() error) { *c = append(*c, f) }

func (c *closeStack) unwind() error {
	var errs []error
	for i := len(*c) - 1; i >= 0; i-- {
		errs = append(errs, (*c)[i]())
	}
	*c = nil
	return errors.Join(errs...)
}

// devicesOnline is the number of connected peers over every channel.
func (s *Server) devicesOnline() int {
	n := 0
	for _, ch := range s.rt.Channels {
		if ch.Adapter != nil {
			n += ch.Adapter.ConnectedPeers()
		}
	}
	return n
}

// Handler serves the HTTP API and the channels' WebSocket endpoints.
func (s *Server) Handler() http.Handler { return s.mux }

// Start starts the store of record's runs (a cluster's worker) and re-queues the messages
// that were accepted before a restart but never answered. The re-queue
// takes a waiting place for each (as AcceptInbound does), waiting for one
// when the bounds are reached, so a large backlog never floods the queues.
func (s *Server) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopBg = cancel
	if l := s.rt.Records.Lifecycle; l != nil {
		if err := l.Run(s.router.Cancel, s.devicesOnline); err != nil {
			s.log.Error("cluster: node not started", "err", err)
		}
	}
	for _, id := range s.rt.Order {
		if ch := s.rt.Channels[id]; ch.Adapter != nil {
			ch.Events.Add(events.Event{Event: events.AdapterStarted, Detail: "websocket at /api/channels/" + id + "/ws"})
		}
	}
	recovered := s.recovered
	s.recovered = nil
	if len(recovered) > 0 {
		s.bgWG.Add(1)
		go func() {
			defer s.bgWG.Done()
			n := 0
			for i, in := range recovered {
				recovered[i] = bus.Inbound{}      // let the queued copy be the only one
				ch := s.rt.Channels[in.ChannelID] // enabled: rebuild left out the others
				if err := s.rt.Admission.ReserveWait(ctx, in.SessionKey, ch.MaxWaitingPerSession()); err != nil {
					return
				}
				s.router.Put(in)
				n++
			}
			s.log.Info("re-queued messages accepted before the restart and never answered", "count", n)
		}()
	}
}

// Serve accepts HTTP connections on ln until ctx ends, then shuts down:
// connections get a going-away close frame, runs in progress get grace to
// finish, and the session log is flushed.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	scheme := "http://"
	if s.TLSEnabled() {
		scheme = "https://"
	}
	if l := s.rt.Records.Lifecycle; l != nil {
		l.Advertise(scheme + ln.Addr().String())
	}
	s.guard.WarnOpen(ln.Addr())
	s.warnOpenChannels(ln.Addr())
	s.Start()
	// Plain requests get read, write and idle timeouts and a header limit
	// (package httpserve); WebSockets leave them behind at the upgrade.
	hs := httpserve.New(s.mux, defaultHTTPLimits, s.log)
	// Open TCP connections stay within the descriptor budget
	// (wschannel.ConnGuard), so the listener can always accept /healthz,
	// the API and new devices, and session files and agents find
	// descriptors.
	guard := wschannel.NewConnGuard(s.fds.Pool(fdbudget.Sockets))
	hs.ConnState = guard.ConnState
	errc := make(chan error, 1)
	adv := s.startDiscovery(ctx, ln.Addr()) // nil unless "discovery" is on (discovery.go)
	s.tls.LogStart(s.log)
	tln := s.tls.Listener(hs, ln, guard) // the guard's listener, in TLS when configured
	go func() { errc <- hs.Serve(tln) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	_ = adv.Stop()
	s.log.Info("closing device connections", "devices", s.devicesOnline(), "grace", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	s.fleet.stopStreams() // live streams would hold hs.Shutdown up
	_ = hs.Shutdown(sctx) // stops accepting; hijacked WebSockets are ours to close
	err := s.Shutdown(sctx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return err
}

// Shutdown closes every connection, waits for runs in progress until ctx
// ends (then cancels them; they run again at the next start), and closes
// the session log. Every reply those runs produced was dispatched by the
// run's goroutine as it ended (to a live connection, or recorded as
// unclaimed once the connections are closed), so none is left behind.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		s.fleet.stopStreams()
		for _, id := range s.rt.Order {
			if a := s.rt.Channels.Adapter(id); a != nil {
				a.Close()
			}
		}
		s.router.Stop(ctx)
		if l := s.rt.Records.Lifecycle; l != nil {
			l.StopRuns() // runs are over: a cluster's next owner takes the partitions now
		}
		if s.stopBg != nil {
			s.stopBg()
			s.bgWG.Wait()
		}
		err = s.closers.unwind() // the capabilities, the runners, the stores, newest first
	})
	return err
}
