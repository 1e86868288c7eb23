// Package procs starts agent processes so that they die with the server,
// even when the server is killed with SIGKILL, and reaps what a crashed
// predecessor left behind.
//
// Three mechanisms, one per way a process can outlive the server:
//
//   - Parent death signal (Linux): the direct child gets a signal when the
//     thread that forked it ends (prctl PR_SET_PDEATHSIG). The signal
//     follows the creating thread, not the process (golang/go#27505), so
//     every agent is forked by one goroutine locked to its OS thread for
//     the life of the process: that thread ends only with the process.
//   - A guard shell: the signal reaches only the direct child, so an
//     agent (a program, Exec, or a shell command, Command) runs under a
//     small POSIX sh guard that leads the process group and, on the
//     parent death signal, kills the whole group (grandchildren
//     included). Its price is one start of sh and one fork per agent
//     (BenchmarkStartNoGuard, BenchmarkStartExec).
//   - A registry (Registry): the process groups are recorded in a file in
//     the workspace (run/agents.pids) and every agent carries a marker
//     variable naming the workspace; at start the next server kills the
//     groups and marked processes a crashed predecessor left (those that
//     left the group, like a daemonized tmux server). A process is killed
//     only when it is provably ours: it carries the marker, or it leads a
//     recorded group with the recorded start time.
package procs
