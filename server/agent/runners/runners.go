// Package runners builds the agent.Runner of a configured agent: the
// builtin echo, or a terminal, nuum, harness or ACP agent.
package runners

import (
	"fmt"
	"log/slog"
	"time"

	"termlink/server/agent"
	"termlink/server/agent/acp"
	"termlink/server/agent/harness"
	"termlink/server/agent/nuum"
	"termlink/server/agent/procs"
	"termlink/server/agent/terminal"
	"termlink/server/config"
)

// Options are what every runner may take.
type Options struct {
	Workspace string          // the harness's
	Procs     *procs.Registry // the agents' process groups
	// Push takes what an agent sends outside a turn (a notice for the
	// session's peer).
	Push   func(sessionKey, text string)
	Logger *slog.Logger
}

// New builds the runner of agent name, configured as a.
func New(name string, a config.Agent, opt Options) (agent.Runner, error) {
	log := opt.Logger.With("agent", name)
	switch {
	case a.Builtin != nil:
		if a.Builtin.Name != "echo" {
			return nil, fmt.Errorf("agent %q: unknown builtin %q", name, a.Builtin.Name)
		}
		return agent.Echo{Delay: time.Duration(a.Builtin.DelayMs) * time.Millisecond,
			WordGap:    time.Duration(a.Builtin.StreamWordMs) * time.Millisecond,
			AskTimeout: time.Duration(a.Builtin.AskTimeoutSeconds) * time.Second}, nil
	case a.Terminal != nil:
		return terminal.New(name, *a.Terminal, terminal.Options{Logger: log, Procs: opt.Procs, Push: opt.Push})
	case a.Nuum != nil:
		return nuum.New(name, *a.Nuum, nuum.Options{Logger: log, Procs: opt.Procs, Push: opt.Push})
	case a.Harness != nil:
		return harness.New(name, *a.Harness, harness.Options{Workspace: opt.Workspace, Logger: log, Procs: opt.Procs})
	case a.ACP != nil:
		return acp.New(name, *a.ACP, acp.Options{Logger: log, Procs: opt.Procs})
	}
	return nil, fmt.Errorf("agent %q is not defined", name)
}
