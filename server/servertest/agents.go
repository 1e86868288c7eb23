package servertest

import "termlink/server/config"

// WithACP is a Start mutation: channel terminal-dev runs the ACP agent
// command bin (args none), one process per session, permissions
// rejected.
func WithACP(bin string) func(*config.Config) {
	return func(c *config.Config) {
		c.Agents["coder"] = config.Agent{ACP: &config.ACPAgent{Command: bin, Args: []string{}, Permission: config.ACPPermissionReject,
			IdleTimeout: 600, MaxProcesses: 4, StartTimeout: 30, AskTimeout: 30}}
		ch := c.Channels["terminal-dev"]
		ch.Agent = "coder"
		c.Channels["terminal-dev"] = ch
	}
}
