package fdbudget

import "termlink/server/metrics"

// Export adds b's series to r: the limit, what each class holds now, how
// often each was refused one, and the agent starts waiting for theirs
// (the agents' ceiling queues runs past it).
func (b *Budget) Export(r *metrics.Registry) {
	r.NewGaugeFunc("termlink_fd_limit", "The process's file descriptor limit (soft RLIMIT_NOFILE at start).", func() float64 { return float64(b.Limit()) })
	for _, c := range []struct {
		class Class
		name  string
	}{{Sockets, "sockets"}, {Files, "session_files"}, {Agents, "agents"}} {
		r.NewGaugeFunc("termlink_fd_"+c.name, "File descriptors held by "+c.class.String()+" (descriptor budget).",
			func() float64 { return float64(b.Stats().Used[c.class]) })
		r.NewCounterFunc("termlink_fd_"+c.name+"_refused_total", "Times "+c.class.String()+" found no file descriptor left in the budget.",
			func() float64 { return float64(b.Stats().Refused[c.class]) })
	}
	r.NewGaugeFunc("termlink_fd_agents_waiting", "Agent starts waiting for their descriptors: the agents hold all the budget lets them (descriptor budget).",
		func() float64 { return float64(b.Stats().Waiting[Agents]) })
}
