package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"termlink/internal/debugserver"
	"termlink/testrig/cluster"
)

// cluster runs `termrig cluster`: a NATS JetStream cluster plus
// termserver edges and workers on loopback (testrig/cluster.Rig).
func (a *app) cluster(ctx context.Context, args []string) error {
	fs, usage := a.newFlagSet("cluster", "[--nodes 3] [--edges 2] [--workers 2] [--nats URLS] [--agent CMD] [--dir DIR] [--partitions N] [--replicas N] [--sync-always] [--debug-addr 127.0.0.1:PORT]")
	opt := cluster.RigOptions{Nodes: 3, Edges: 2, Workers: 2}
	fs.Var(intFlag{&opt.Nodes}, "nodes", "`N` NATS JetStream nodes started in this process (ignored with --nats)")
	fs.Var(intFlag{&opt.Edges}, "edges", "`N` termserver edges (they hold the device WebSockets)")
	fs.Var(intFlag{&opt.Workers}, "workers", "`N` termserver workers (they run the agents)")
	fs.StringVar(&opt.NATS, "nats", "", "an external NATS JetStream cluster's `URLs`, comma-separated: no NATS node is started")
	fs.StringVar(&opt.Agent, "agent", "", "a Terminal Protocol v1 rich agent `command`, run in this directory (default: the built-in echo agent)")
	fs.StringVar(&opt.Dir, "dir", "", "keep every node's config, store, workspace and log in `DIR` (default: a temporary directory, removed at exit)")
	fs.Var(intFlag{&opt.Partitions}, "partitions", "`N` partitions of the inbound stream (default: the server's, 16)")
	fs.Var(intFlag{&opt.Replicas}, "replicas", "`N` JetStream replicas of the streams and buckets (default: the NATS nodes started, at most 3; with --nats, 3)")
	fs.BoolVar(&opt.SyncAlways, "sync-always", false, "start the NATS nodes with jetstream { sync_interval: always }: each write is on disk before JetStream acks it (default: nats-server's, an fsync every 2 minutes; ignored with --nats)")
	debugAddr := fs.String("debug-addr", "", "serve net/http/pprof on this loopback `address`: one profile of the NATS nodes, edges and workers this process runs together")
	if err := parse(fs, usage, args); err != nil {
		return err
	}
	if *debugAddr != "" {
		ln, err := debugserver.Listen(*debugAddr)
		if err != nil {
			return usagef("%v", err)
		}
		debugCtx, stopDebug := context.WithCancel(ctx)
		defer stopDebug()
		go debugserver.Serve(debugCtx, ln, slog.New(slog.NewTextHandler(a.stderr, nil)))
	}
	if opt.NATS == "" && opt.Nodes < 1 {
		return usagef("--nodes must be at least 1 (or give --nats)")
	}
	if opt.Edges < 0 || opt.Workers < 0 || opt.Partitions < 0 || opt.Replicas < 0 {
		return usagef("--edges, --workers, --partitions and --replicas must not be negative")
	}
	if opt.Dir == "" {
		dir, err := os.MkdirTemp("", "termrig-cluster-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		opt.Dir = dir
	}
	log := slog.New(slog.NewTextHandler(a.stderr, nil))
	fmt.Fprintf(a.stderr, "termrig cluster: node files and logs in %s\n", opt.Dir)
	return cluster.Rig(ctx, opt, a.stdout, log)
}
