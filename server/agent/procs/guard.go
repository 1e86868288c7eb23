package procs

// guardScript runs its arguments ("$@": the agent's program and
// arguments, or its shell, -c and command) as a background job and waits
// for it, so that a trap can run while it runs. The job is a simple
// command: the guard's fork of itself execs the program, so a program
// started with Exec costs one shell (the guard), a command started with
// Command two (the guard and the command's shell):
//   - SIGUSR2, its parent death signal, kills the whole process group:
//     the agent and everything it started. Not SIGHUP: a server started
//     under nohup passes SIGHUP on ignored, and a shell cannot trap a
//     signal ignored on entry; Go resets every other signal it handles
//     to the default in its children.
//   - SIGTERM is passed on by the group itself (the agent gets it too);
//     the guard keeps waiting, so the agent may end gracefully.
//
// The job's stdin is the guard's (an async list would get /dev/null,
// hence fd 3); the guard then lets go of stdin, stdout and stderr, so the
// agent alone holds them (closing its stdout is an EOF for the reader)
// and the shell's job messages ("Killed") go nowhere. An agent killed by a signal ends the guard by the same
// signal, so callers see what they would without the guard.
const guardScript = `trap 'kill -KILL 0' USR2
trap 't=1' TERM
exec 3<&0
"$@" <&3 3<&- &
c=$!
exec 3<&- </dev/null >/dev/null 2>&1
while :; do
	t=
	wait $c
	s=$?
	[ -n "$t" ] && kill -0 $c 2>/dev/null || break
done
trap - USR2 TERM
[ $s -gt 128 ] && [ $s -lt 160 ] && kill -$((s - 128)) $$
exit $s`

// guardName is the guard's $0, what ps shows for it.
const guardName = "termlink-agent-guard"
