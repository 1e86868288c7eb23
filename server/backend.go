package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"termlink/server/cluster"
	"termlink/server/config"
	"termlink/server/diag"
	"termlink/server/events"
	fleetapi "termlink/server/fleet"
	"termlink/server/identity"
	"termlink/server/notices"
	"termlink/server/record"
	"termlink/server/record/local"
	"termlink/server/registry"
	"termlink/server/releases"
	"termlink/server/rollout"
	"termlink/server/runtime"
	"termlink/server/settings"
)

// The backend (issue 39): where the server keeps what it must not lose.
// The config picks it once, here: this node's workspace and memory
// (localBackend), or in cluster mode the cluster's NATS JetStream
// (clusterBackend). The backend opens every store the capabilities use —
// the store of record, the device registry, the learnt bindings and the
// pairing codes, the channels' events, the notice mailboxes, the signed
// releases, the settings pushed to devices — and this
// is the only file of the root that knows which; the wiring files
// (fleet.go, identity.go, events.go, notices.go, settings.go) ask the
// backend, and the capabilities call only their packages' interfaces.
type backend interface {
	// openDevices opens the device registry kept in dir (the cluster's:
	// this node's registry written behind to the cluster, every node's
	// devices for the reads).
	openDevices(ctx context.Context, dir string, opt registry.Options) (deviceRegistry, error)
	// openBindings opens channelID's learnt credentials (dir is the
	// workspace's credentials directory; the cluster's are its bucket's).
	openBindings(ctx context.Context, dir, channelID string, noSync bool, log *slog.Logger) (identity.Bindings, error)
	// openCodes returns the pending pairing codes: nil for identity's
	// default (LocalCodes, in memory).
	openCodes(ctx context.Context, log *slog.Logger) identity.Codes
	// openEventFeed opens where the channels' events are published for
	// every node to read: nil (no error) on a single server.
	openEventFeed(ctx context.Context, perChannel int) (runtime.EventFeed, error)
	// openNotices opens the notice mailboxes (dir is the workspace's
	// notices directory). In a cluster, past ctx or noticesOpenWait the
	// mailboxes load in the background and the start goes on.
	openNotices(ctx context.Context, dir string, opt notices.Options) (notices.Mailboxes, error)
	// openReleases opens the store of signed termd releases (opt.Dir is
	// the workspace's releases directory; cacheDir where a cluster node
	// keeps the copies it serves).
	openReleases(ctx context.Context, opt releases.Options, cacheDir string) (*releases.Store, error)
	// openSettings opens the settings pushed to devices (opt.Dir is the
	// workspace's settings directory): its settings.json, or the
	// cluster's bucket, followed so that every node pushes a change made
	// through any node to the devices connected to it.
	openSettings(ctx context.Context, opt settings.Options, deps settings.Deps) (*settings.Store, error)
	// openRollouts opens the staged rollouts (opt.Dir is the
	// workspace's rollouts directory): its files, or the cluster's
	// bucket, followed by every node, advanced by one at a time.
	openRollouts(ctx context.Context, opt rollout.Options) (*rollout.Manager, error)
	// diagRemote is how a logs or self-test request reaches a device
	// connected to another node: nil on a single server.
	diagRemote() diag.Remote
	// serveDiag answers, with serve, the diag requests other nodes send
	// this one's edge (until the store of record closes); nothing on a
	// single server or a node that is no edge.
	serveDiag(serve func(ctx context.Context, req []byte) []byte) error
}

// clusterOpenWait bounds each wait at start for NATS to make or find a
// cluster store (a bucket or stream, and the mirror of it): the devices,
// the bindings, the pairing codes, the events stream, the settings, the
// notice mailboxes (these wait noticesOpenWait), the releases. What
// happens past it is each store's: the device registry, the bindings
// and the settings fail the start; the codes are made by the first
// enrollment; the events stay this node's own; the notices and the
// releases (once their bucket is made) load in the background.
const clusterOpenWait = 30 * time.Second

// noticesOpenWait bounds the wait at start for the cluster's notice
// mailboxes (their bucket, made by the first notice, looked up and
// followed): past it they load in the background, the notice API answers
// 503 until then, and the start goes on.
const noticesOpenWait = 3 * time.Second

// openBackend opens the backend cfg names, and with it the store of
// record and its parts: in cluster mode cluster.Store (whose NATS node
// opens every other store; an edge's presence, its loops, its status),
// else the workspace's write-ahead log and session files (local.Store:
// the joined starts, the messages on their way to the router, the
// recovery at start-up). The runtime calls only record.Parts, and a
// part the store does not have is nil.
func openBackend(rt *runtime.Runtime, log *slog.Logger, cfg *config.Config, opt Options, dedupeBytes int64) (backend, record.Parts, error) {
	host := rt.Host()
	if cfg.Cluster.Enabled() {
		cs, err := cluster.OpenStore(cfg.Cluster, host, cluster.StoreOptions{Logger: log, Process: rt.Process(),
			ClaimHook: opt.claimHook, Joins: func(channelID string) bool {
				// The router is made after the store, before any message
				// runs; until then, assume it may.
				return rt.Router == nil || rt.Router.Joins(channelID)
			}})
		if err != nil {
			return nil, record.Parts{}, err
		}
		return clusterBackend{node: cs.Node(), log: log},
			record.Parts{Store: cs, Edge: cs, Lifecycle: cs, Status: cs}, nil
	}
	wopt := opt.wal
	wopt.NoSync = opt.NoSync
	ls, err := local.Open(filepath.Join(cfg.Workspace, "wal"), rt.Sessions, host, local.Options{
		Logger: log, DedupePerSession: opt.DedupePerSession, DedupeBytes: dedupeBytes, WAL: wopt,
		Runs: func(id string) bool {
			ch := rt.Channels[id]
			return ch != nil && ch.Config.Enabled
		},
		WriteFailed: func() { rt.Metrics.LogFailures.Inc("") },
	})
	if err != nil {
		return nil, record.Parts{}, err
	}
	return localBackend{}, record.Parts{Store: ls, Joiner: ls, InFlight: ls, Recoverer: ls}, nil
}

// localBackend is one server's: the workspace's files and this process's
// memory.
type localBackend struct{}

func (localBackend) openDevices(_ context.Context, dir string, opt registry.Options) (deviceRegistry, error) {
	r, err := registry.Open(dir, opt)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (localBackend) openBindings(_ context.Context, dir, channelID string, noSync bool, log *slog.Logger) (identity.Bindings, error) {
	b, err := identity.OpenLocalBindings(dir, channelID, noSync, log)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (localBackend) openCodes(context.Context, *slog.Logger) identity.Codes { return nil }

func (localBackend) openEventFeed(context.Context, int) (runtime.EventFeed, error) { return nil, nil }

func (localBackend) openSettings(_ context.Context, opt settings.Options, deps settings.Deps) (*settings.Store, error) {
	return settings.Open(opt, deps)
}

func (localBackend) openRollouts(_ context.Context, opt rollout.Options) (*rollout.Manager, error) {
	return rollout.Open(opt)
}

func (localBackend) diagRemote() diag.Remote { return nil }

func (localBackend) serveDiag(func(context.Context, []byte) []byte) error { return nil }

func (localBackend) openReleases(_ context.Context, opt releases.Options, _ string) (*releases.Store, error) {
	return releases.Open(opt)
}

func (localBackend) openNotices(_ context.Context, dir string, opt notices.Options) (notices.Mailboxes, error) {
	m, err := notices.Open(dir, opt)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// clusterBackend is the cluster's: KV buckets and streams on the store of
// record's NATS node (and an object store for the releases), so that a
// device, a binding, a pairing code, an event, a notice or a release made
// through one node holds on every node.
type clusterBackend struct {
	node *cluster.Node
	log  *slog.Logger
}

var (
	_ backend = localBackend{}
	_ backend = clusterBackend{}

	_ cluster.Host         = runtime.Host{}
	_ cluster.DeviceCloser = runtime.Host{}
	_ deviceRegistry       = (*cluster.Devices)(nil)
)

func (b clusterBackend) openDevices(ctx context.Context, dir string, opt registry.Options) (deviceRegistry, error) {
	ctx, cancel := context.WithTimeout(ctx, clusterOpenWait)
	defer cancel()
	d, err := b.node.OpenDevices(ctx, dir, opt, cluster.DevicesOptions{})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// openBindings warns of a single server's bindings file left in the
// workspace: the cluster's bucket is read instead.
func (b clusterBackend) openBindings(ctx context.Context, dir, channelID string, _ bool, log *slog.Logger) (identity.Bindings, error) {
	if file := filepath.Join(dir, channelID+".json"); fileExists(file) {
		log.Warn("cluster mode: the workspace's device bindings are not read; the cluster's are (KV "+cluster.BindingsBucket+"): first-use tokens bind again, enrolled devices enroll again",
			"channel_id", channelID, "file", file)
	}
	ctx, cancel := context.WithTimeout(ctx, clusterOpenWait)
	defer cancel()
	bs, err := b.node.OpenBindings(ctx, channelID)
	if err != nil {
		return nil, err
	}
	return bs, nil
}

// openCodes makes the codes' buckets now if NATS answers, else the first
// call that needs them does.
func (b clusterBackend) openCodes(ctx context.Context, log *slog.Logger) identity.Codes {
	c := b.node.Codes(cluster.CodesOptions{})
	ctx, cancel := context.WithTimeout(ctx, clusterOpenWait)
	defer cancel()
	if err := c.Open(ctx); err != nil {
		log.Warn("cluster: the pairing codes' buckets not made yet; the first enrollment will try again", "err", err)
	}
	return c
}

func (b clusterBackend) openEventFeed(ctx context.Context, perChannel int) (runtime.EventFeed, error) {
	ctx, cancel := context.WithTimeout(ctx, clusterOpenWait)
	defer cancel()
	f, err := b.node.OpenEventFeed(ctx, perChannel)
	if err != nil {
		return nil, err
	}
	return clusterEvents{f}, nil
}

func (b clusterBackend) openNotices(ctx context.Context, _ string, opt notices.Options) (notices.Mailboxes, error) {
	ctx, cancel := context.WithTimeout(ctx, noticesOpenWait)
	defer cancel()
	m, err := b.node.OpenNotices(ctx, cluster.NoticesOptions{Options: opt})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// openReleases opens the cluster's releases (object store
// termlink_releases), warning of a single server's releases left in the
// workspace: they are not read.
func (b clusterBackend) openReleases(ctx context.Context, opt releases.Options, cacheDir string) (*releases.Store, error) {
	if dirs, err := os.ReadDir(opt.Dir); err == nil && len(dirs) > 0 {
		b.log.Warn("cluster mode: the workspace's releases are not read; the cluster's are (object store "+cluster.ReleasesBucket+"): upload them again",
			"dir", opt.Dir)
	}
	ctx, cancel := context.WithTimeout(ctx, clusterOpenWait)
	defer cancel()
	opt.LoadInBackground = true
	return b.node.OpenReleases(ctx, opt, cluster.ReleasesOptions{CacheDir: cacheDir})
}

// openSettings warns of a single server's settings file left in the
// workspace: the cluster's bucket is read instead.
func (b clusterBackend) openSettings(ctx context.Context, opt settings.Options, deps settings.Deps) (*settings.Store, error) {
	if file := filepath.Join(opt.Dir, settings.FileName); fileExists(file) {
		b.log.Warn("cluster mode: the workspace's settings file is not read; the cluster's are (KV "+cluster.SettingsBucket+"): put its documents again through the settings API",
			"file", file)
	}
	ctx, cancel := context.WithTimeout(ctx, clusterOpenWait)
	defer cancel()
	return b.node.OpenSettings(ctx, opt, deps)
}

// openRollouts warns of a single server's rollouts left in the
// workspace: the cluster's bucket is read instead.
func (b clusterBackend) openRollouts(ctx context.Context, opt rollout.Options) (*rollout.Manager, error) {
	if files, _ := filepath.Glob(filepath.Join(opt.Dir, "ro-*.json")); len(files) > 0 {
		b.log.Warn("cluster mode: the workspace's rollouts are not read; the cluster's are (KV "+cluster.RolloutsBucket+")",
			"dir", opt.Dir)
	}
	ctx, cancel := context.WithTimeout(ctx, clusterOpenWait)
	defer cancel()
	return b.node.OpenRollouts(ctx, opt)
}

func (b clusterBackend) diagRemote() diag.Remote { return clusterDiag{b.node} }

func (b clusterBackend) serveDiag(serve func(context.Context, []byte) []byte) error {
	if !b.node.Config().Edge() {
		return nil
	}
	return b.node.ServeDiag(serve, diagBounds)
}

// diagBounds bound the diag requests between nodes: package diag's, and
// an edge serves at most twice the requests its diag.Requests takes (past
// those, they are refused by diag's own bound, ErrTooMany, at once).
var diagBounds = cluster.DiagOptions{MaxRequest: diag.MaxRemoteRequestBytes, MaxAnswer: diag.MaxRemoteAnswerBytes,
	MaxServing: 2 * diag.DefaultMaxTotal}

// clusterDiag is the cluster's diag transport as a diag.Remote: the
// transport's answers in diag's words.
type clusterDiag struct{ node *cluster.Node }

func (c clusterDiag) Ask(ctx context.Context, channelID, peerID string, req []byte) (string, []byte, error) {
	edge, answer, err := c.node.AskDiag(ctx, channelID, peerID, req, diagBounds)
	switch {
	case errors.Is(err, cluster.ErrNoEdge):
		err = diag.ErrNotConnected
	case errors.Is(err, cluster.ErrHeldHere):
		err = diag.ErrNotSent // this node's connection did not take it
	case errors.Is(err, cluster.ErrEdgeBusy):
		err = fmt.Errorf("%w: edge %s serves %d requests of other nodes already", diag.ErrTooMany, edge, diagBounds.MaxServing)
	}
	return edge, answer, err
}

// clusterEvents is the cluster's events stream as a runtime.EventFeed.
type clusterEvents struct{ *cluster.EventFeed }

func (f clusterEvents) View(channelID string, local *events.Log) fleetapi.EventLog {
	return f.EventFeed.View(channelID, local)
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}
