// Package procs starts agent processes so that they die with the server,
// even when the server is killed with SIGKILL, and reaps what a crashed
// predecessor left behind.
//
// Three mechanisms, one per way a process can outlive the server:
//
//   - Parent death signal (Linux): every agent leads its own process
//     group and gets SIGKILL when the thread that forked it ends (prctl
//     PR_SET_PDEATHSIG). The signal follows the creating thread, not the
//     process (golang/go#27505), so every agent is forked by one goroutine
//     locked to its OS thread for the life of the process: that thread
//     ends only with the process.
//   - A sentinel (Linux): the signal reaches only the agent itself, not
//     what it started, so each registry keeps one small sh process that
//     waits on a pipe only the server writes to. When the server ends,
//     however it ends, the kernel closes the pipe and the sentinel kills
//     every process group the registry file still lists (grandchildren
//     included). One sentinel per server, started with the first agent,
//     instead of a guard shell per agent: an agent run costs one fork and
//     exec of the agent and nothing else (BenchmarkStartExec).
//   - A registry (Registry): the process groups are recorded in a file in
//     the workspace (run/agents.pids) and every agent carries a marker
//     variable naming the workspace; at start the next server kills the
//     groups and marked processes a crashed predecessor left (those that
//     left the group, like a daemonized tmux server). A process is killed
//     only when it is provably ours: it carries the marker, or it leads a
//     recorded group with the recorded start time.
package procs
