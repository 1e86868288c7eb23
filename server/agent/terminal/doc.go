// Package terminal runs nanobot terminal micro-agents: Terminal Protocol v1
// (docs/agents.md), one subprocess per message.
//
// For each message the Runner starts the configured command in the
// workspace: a command of plain words (see splitCommand: no quoting but
// simple single quotes, no $, globs, redirections or operators) is split
// into its program and arguments and run without a shell, {message}
// becoming one argument; any other runs with "/bin/sh -c", {message}
// replaced by the POSIX-quoted text. Either way the program is found as
// sh finds it (PATH, relative to the workspace) and runs in a process
// group of its own that dies with the server (package procs: parent
// death signal, guard, reaping after a crash). The Runner writes one
// JSON [Envelope] line to its stdin and closes stdin. In rich mode stdout is
// read line by line as it arrives: "message", "progress", "error" and "log"
// frames, and termlink's "delta", "notice" and "question" ([ParseFrame]); a JSON object with another "type" (a later
// protocol's frame, or null) is dropped with a log line, as nanobot does;
// every other line is kept as plain text. In plain
// mode stdout is taken whole when the process exits. Absolute paths of
// existing media files in plain text become attachments ([DetectMedia]).
//
// Streaming (termlink's extension of rich mode): an agent may print
// {"type":"delta","text":"..."} lines as it writes its reply, each text
// appended to the ones before. Each is passed on at once to
// agent.Request.Stream (when the device listed "stream"; the router
// coalesces them), so the text appears on the device while the agent
// works. The agent ends with a message frame carrying the whole text
// (then the deltas were a preview of it and are not repeated), or with
// none: then the deltas' concatenation is the reply's message. What is
// streamed stays a prefix of that text: leading newlines are not streamed
// and trailing white space waits for the text after it. A delta frame
// whose "text" is missing, null or not a string is dropped with a log
// line and an "agent_bad_frame" event saying so; the run goes on. An
// agent that prints no delta frames behaves exactly as before.
//
// Questions (termlink's extension of rich mode, issue 42): an agent
// configured with "questions": true keeps its stdin open for the run
// (nanobot's agents get it closed after the envelope; so do the others)
// and may print a question for the person at the device:
//
//	{"type":"question","id":"q1","text":"Deploy now?",
//	 "options":[{"id":"yes","label":"Yes"},{"id":"no","label":"No"}],
//	 "timeout_seconds":60}
//
// "id" is the agent's own (at most 128 bytes), "options" 2 to 9 with ids
// of at most 64 bytes and labels of at most 64 (no control characters),
// "text" at most 16 KiB, "timeout_seconds" optional (1 s to a day;
// default 5 minutes). The runner asks the device (agent.Request.Ask: a
// device that listed "choice" shows it, one key per option) and writes
// one line to the agent's stdin when it is settled:
//
//	{"type":"answer","id":"q1","option":"yes"}
//	{"type":"answer","id":"q1","option":null,"reason":"timeout"}
//
// reason, when option is null: "timeout" (not answered in time),
// "cancelled" (the run was cancelled), "unavailable" (the device did not
// list "choice": answered at once), "busy" (another question of this run
// is still open: one at a time) or "refused" (the question is out of
// bounds; "error" names the field). The stdout reader goes on meanwhile:
// progress and deltas still flow while a question is open. A question
// frame from an agent without "questions" is dropped with a log line and
// an "agent_bad_frame" event, as is one without an "id" or "text".
//
// The run ends with one agent.Result: the message frames' texts (or the
// deltas' text when there are none) and the plain text, joined by blank
// lines, then the error frames' texts, then "STDERR: ..." (the first 64
// KiB) and "(exit code N)" when there are any.
// Timeouts, cancellation, Close, an over-long line and too much output kill
// the whole process group with SIGKILL, so grandchildren die too. After the
// agent exits, processes it left behind get a short grace (KillGrace) to
// close its stdout and stderr, then the group is killed.
//
// Limits: a rich-mode stdout line over Options.MaxLineBytes (1 MiB) and
// stdout over TerminalAgent.MaxOutputBytes (4 MiB) end the run with an
// error reply; stderr is drained as it comes, its first
// Options.MaxStderrBytes (64 KiB) kept. Output that is not valid UTF-8 is
// repaired with U+FFFD.
//
// Processes a run leaves behind that closed stdout and stderr (daemons,
// "cmd >/dev/null &") are not waited for and not killed; a process that
// wants to outlive its run should leave the group (setsid). None outlives
// the server: the next server kills what carries its workspace's marker.
package terminal
