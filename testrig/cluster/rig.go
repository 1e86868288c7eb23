package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"termlink/server"
	"termlink/server/config"
)

// RigOptions configures Rig: `termrig cluster`.
type RigOptions struct {
	Nodes   int // NATS nodes started here (ignored with NATS)
	Edges   int // termserver edges
	Workers int // termserver workers
	// NATS is an external cluster's URLs (comma-separated): no NATS
	// node is started.
	NATS string
	// Agent is a Terminal Protocol v1 rich agent command run in the
	// current directory (empty: the built-in echo agent).
	Agent string
	// Partitions for every node (0: the server's default).
	Partitions int
	// Replicas of the streams and buckets (0: the number of NATS nodes
	// started here, at most 3; with NATS, the server's default, 3).
	Replicas int
	// Dir holds every node's files and logs (required).
	Dir string
	// SyncAlways starts the NATS nodes with jetstream { sync_interval:
	// always } (NATSOptions.SyncAlways); ignored with NATS.
	SyncAlways bool
}

// Rig runs `termrig cluster`: a JetStream cluster in this process (the
// nats-server library) unless opt.NATS names one, then the edges and the
// workers in this process (server.New + Serve, one workspace each under
// opt.Dir). It prints one line per node in the contract's format, then
// "ready", and runs until ctx ends; then it stops everything (servers
// first, NATS last) and returns nil. Logs go to files in opt.Dir; log
// says where.
func Rig(ctx context.Context, opt RigOptions, out io.Writer, log *slog.Logger) error {
	if opt.Dir == "" {
		return errors.New("cluster rig: no directory")
	}
	if opt.Edges < 0 || opt.Workers < 0 || (opt.NATS == "" && opt.Nodes < 1) {
		return fmt.Errorf("cluster rig: %d NATS nodes, %d edges, %d workers: want at least one NATS node and no negative count", opt.Nodes, opt.Edges, opt.Workers)
	}
	natsURLs := opt.NATS
	if natsURLs == "" {
		c, err := StartNATS(ctx, NATSOptions{Nodes: opt.Nodes, Dir: filepath.Join(opt.Dir, "nats"), SyncAlways: opt.SyncAlways})
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.Close(sctx); err != nil {
				log.Error("stopping nats", "err", err)
			}
		}()
		for _, n := range c.Nodes {
			fmt.Fprintf(out, "%-8s%s %s\n", "nats", n.Name, n.URL())
		}
		natsURLs = c.URLs()
		if opt.Replicas == 0 {
			opt.Replicas = min(opt.Nodes, 3)
		}
	}
	agent := Agent{}
	if opt.Agent != "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("--agent: %w", err)
		}
		agent = Agent{Command: "cd " + shellQuote(wd) + " && " + opt.Agent, Protocol: "rich"}
	}
	var specs []NodeSpec
	for i := range opt.Edges {
		specs = append(specs, NodeSpec{Name: "edge-" + strconv.Itoa(i+1), Role: "edge"})
	}
	for i := range opt.Workers {
		specs = append(specs, NodeSpec{Name: "worker-" + strconv.Itoa(i+1), Role: "worker"})
	}
	sctx, stopServers := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		stopServers()
		wg.Wait()
	}()
	addrs := map[string]string{}
	for _, spec := range specs {
		spec.NATS, spec.Partitions, spec.Replicas, spec.Agent = natsURLs, opt.Partitions, opt.Replicas, agent
		spec.Dir = filepath.Join(opt.Dir, spec.Name)
		// One after the other: JetStream does not answer all of several
		// clients creating the same stream at once.
		addr, err := serveInProcess(sctx, &wg, spec)
		if err != nil {
			return err
		}
		addrs[spec.Name] = addr
		if spec.Role == "edge" {
			fmt.Fprintf(out, "%-8s%s http://%s ws://%s/api/channels/%s/ws\n", spec.Role, spec.Name, addr, addr, Channel)
		} else {
			fmt.Fprintf(out, "%-8s%s http://%s\n", spec.Role, spec.Name, addr)
		}
	}
	// Ready when every node sees the whole cluster: a script that reads
	// "ready" can check /api/status at once.
	var urls []string
	for _, spec := range specs {
		urls = append(urls, "http://"+addrs[spec.Name])
	}
	for _, u := range urls {
		if err := WaitClusterNodes(ctx, u, len(specs)); err != nil {
			if ctx.Err() != nil {
				return nil // interrupted while starting
			}
			return err
		}
	}
	fmt.Fprintln(out, "ready")
	log.Info("cluster rig ready; Ctrl-C stops it", "dir", opt.Dir)
	<-ctx.Done()
	return nil
}

// serveInProcess runs one node's termserver in this process; it stops
// when ctx ends (wg is done then). Its log is Dir/termserver.log.
func serveInProcess(ctx context.Context, wg *sync.WaitGroup, spec NodeSpec) (string, error) {
	path, err := spec.WriteConfig()
	if err != nil {
		return "", err
	}
	cfg, err := config.Load(path)
	if err != nil {
		return "", fmt.Errorf("node %s: %w", spec.Name, err)
	}
	lf, err := os.OpenFile(filepath.Join(spec.Dir, "termserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", fmt.Errorf("node %s: %w", spec.Name, err)
	}
	log := slog.New(slog.NewTextHandler(lf, nil)).With("node", spec.Name)
	srv, err := server.New(cfg, server.Options{Logger: log})
	if err != nil {
		_ = lf.Close()
		return "", fmt.Errorf("node %s: %w", spec.Name, err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		_ = lf.Close()
		return "", fmt.Errorf("node %s: listen: %w", spec.Name, err)
	}
	addr := ln.Addr().String()
	log.Info("termserver listening", "addr", addr, "workspace", cfg.Workspace)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer lf.Close()
		if err := srv.Serve(ctx, ln, 5*time.Second); err != nil {
			log.Error("serve", "err", err)
		}
	}()
	return addr, nil
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
