package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"termlink/server/cluster"
	"termlink/server/identity"
)

// Where device identity is kept (issue 25): in cluster mode the cluster's
// KV buckets (cluster.Bindings, cluster.Codes), so that a token bound on
// one edge holds on every edge and a pairing code asked for through one
// edge is approved on any node and collected through another; else the
// workspace's file and this process's memory. This is the one place that
// knows which; the identity routes and the connections call only
// identity.Bindings and identity.Codes. Called from identity_conn.go
// (openCreds, identityRoutes), after openRecords.

// identityOpenWait bounds creating the cluster's bindings bucket at start.
const identityOpenWait = 30 * time.Second

// openBindings opens channelID's learnt credentials: the cluster's, or
// dir/<channelID>.json (dir is the workspace's credentials directory).
func openBindings(rt *Runtime, dir, channelID string, noSync bool, log *slog.Logger) (identity.Bindings, error) {
	if cs, ok := rt.records.(*cluster.Store); ok {
		if _, err := os.Stat(filepath.Join(dir, channelID+".json")); err == nil {
			log.Warn("cluster mode: the workspace's device bindings are not read; the cluster's are (KV "+cluster.BindingsBucket+"): first-use tokens bind again, enrolled devices enroll again",
				"channel_id", channelID, "file", filepath.Join(dir, channelID+".json"))
		}
		ctx, cancel := context.WithTimeout(context.Background(), identityOpenWait)
		defer cancel()
		return cs.Node().OpenBindings(ctx, channelID)
	}
	return identity.OpenLocalBindings(dir, channelID, noSync, log)
}

// openCodes returns the pending pairing codes: the cluster's, or nil
// (identity.New's default, in memory). The cluster's buckets are made
// now if NATS answers, else by the first call that needs them.
func openCodes(rt *Runtime, log *slog.Logger) identity.Codes {
	cs, ok := rt.records.(*cluster.Store)
	if !ok {
		return nil
	}
	c := cs.Node().Codes(cluster.CodesOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), identityOpenWait)
	defer cancel()
	if err := c.Open(ctx); err != nil {
		log.Warn("cluster: the pairing codes' buckets not made yet; the first enrollment will try again", "err", err)
	}
	return c
}
