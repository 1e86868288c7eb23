package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"termlink/server/config"
)

// checkConfigFile loads path as start-up does (syntax, keys, values,
// references, the TLS files it names) and reports: "FILE: ok" on stdout,
// or every problem on its own line on stderr and an error (exit 1).
func checkConfigFile(path string, stdout, stderr io.Writer) error {
	cfg, err := config.Load(path)
	if err != nil {
		lines := strings.Split(err.Error(), "\n")
		for _, l := range lines {
			fmt.Fprintln(stderr, l)
		}
		n := "1 problem"
		if len(lines) > 1 {
			n = fmt.Sprintf("%d problems", len(lines))
		}
		return errors.New(path + ": " + n)
	}
	fmt.Fprintf(stdout, "%s: ok (channels: %d, agents: %d, workspace: %s)\n", path, len(cfg.Channels), len(cfg.Agents), cfg.Workspace)
	return nil
}
