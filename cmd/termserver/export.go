package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"termlink/server/cluster"
	"termlink/server/config"
)

// exportSessions is `termserver --config FILE export-sessions DIR`: the
// cluster's session history (stream TERMLINK_HIST) written as one nanobot
// JSONL file per session in DIR, as workspace/sessions holds them.
func exportSessions(cfg *config.Config, args []string, log *slog.Logger) error {
	if len(args) != 1 {
		return fmt.Errorf("export-sessions takes one argument, the directory to write the session files to")
	}
	if !cfg.Cluster.Enabled() {
		return fmt.Errorf("export-sessions reads a cluster's session history: the config has no \"cluster\" block (a single termserver keeps its sessions in WORKSPACE/sessions already)")
	}
	dir := args[0]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("export-sessions: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := cfg.Cluster
	c.Name += "-export" // not this node: its heartbeat and leases stay its own
	node, err := cluster.OpenReader(ctx, c, log)
	if err != nil {
		return err
	}
	defer node.Close()
	sessions, records, err := node.ExportSessions(ctx, dir)
	if err != nil {
		return err
	}
	fmt.Printf("exported %d sessions (%d records) to %s\n", sessions, records, dir)
	return nil
}
