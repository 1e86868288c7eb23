// Package session is the server's durable per-session log: one JSONL file per
// session in nanobot's format, written append-only with group commit.
//
// The server records every user message and assistant reply here and, at
// start-up, rebuilds its dedupe table from the tails of these files with
// [Store.ScanTails].
//
// # File format
//
// The format is nanobot's (spec/nanobot-data-model.md, "Session Storage
// (JSONL)"), so nanobot and termlink can read each other's sessions.
//
// Each session is the file <dir>/<name>.jsonl (dir is workspace/sessions).
// The name is the session key with every byte outside [A-Za-z0-9._:-]
// percent-encoded (%2F for '/', %25 for '%') and a leading '.' encoded as
// %2E, so a key can never name a file outside dir; the key
// "terminal-dev:local:device-001" is stored as
// "terminal-dev:local:device-001.jsonl". A key whose escaped name would be
// longer than 255 bytes (NAME_MAX) is stored as the first 120 bytes of the
// escaped name, '~', the SHA-256 of the key in hex and ".jsonl"; '~' is
// always escaped otherwise, so such a name cannot be mistaken for a plain
// one. The key is always taken from the metadata line, not from the file
// name.
//
// Line 1 is nanobot's metadata record:
//
//	{"_type":"metadata","key":"terminal-dev:local:dev1","created_at":"2026-03-01T10:00:00.123456","updated_at":"2026-03-01T10:00:00.123456","metadata":{},"last_consolidated":0}
//
// Every further line is one message record:
//
//	{"role":"user","content":"hi","timestamp":"2026-03-15T14:30:00.123456","message_id":"m-1"}
//	{"role":"assistant","content":"You said: hi","timestamp":"2026-03-15T14:30:00.456789","message_id":"m-1","run_id":"run-1","finish_reason":"stop"}
//
// Before a message's run starts (before the agent gets it), the server
// records the start with a "system" record (not a reply: nanobot readers
// and dedupe do not take it for an answer):
//
//	{"role":"system","content":"the run of message m-2 started","timestamp":"...","message_id":"m-2","run_id":"run-1","event":"run_started"}
//
// A message found unanswered at start-up without it only waited, and is
// simply run. One with it was cut short by a restart: the server records
// that before running it again, instead of a second run_started:
//
//	{"role":"system","content":"the run of message m-2 was cut short by a server restart; it runs again once","timestamp":"...","message_id":"m-2","run_id":"run-1","event":"run_interrupted"}
//
// Found unanswered with run_interrupted, its re-run was cut short too: it
// is answered with an error reply, never run a third time. Each of these
// records is written at most once per message id.
//
// Timestamps are local time without a zone, with microseconds (layout
// [TimeLayout]). Fields this package does not know (tool_calls, name, ...)
// are kept in [Record.Extra] and written back unchanged.
//
// # Durability
//
// One writer goroutine owns every file. [Store.Append] queues its records and
// waits; the writer takes everything queued, writes each file's new lines
// with one write call, fsyncs each touched file once, and then answers every
// waiter. A new file is written to a temporary file, fsynced and renamed into
// place, and the directory is fsynced, so a session file always starts with a
// complete metadata line. Each line is one JSON object and a '\n', so a crash
// leaves at most one torn last line; readers skip it with a warning, and the
// next append starts on a fresh line.
//
// With [Options.SyncLater] (a caller whose write-ahead log holds every
// record first) appends and new files are written without fsync, and
// [Store.Sync] makes everything appended before it durable with one
// syncfs(2); metadata rewrites still fsync. [EncodeRecords] and
// [Store.AppendEncoded] let such a caller encode the lines once for both.
//
// With [Options.WriteBehind] as well (termserver) an append writes
// nothing: its lines are kept in memory after the pending lines of the
// same file, and the call returns (no handoff to the writer, no system
// call). They are written, one write per file in one run of the writer:
// by Sync, before its syncfs (so everything appended before Sync is in
// the files and durable when it returns: the caller then releases its
// log); by Close; by an append that finds [Options.MaxPending] bytes
// pending (default [DefaultMaxPending]); and before any read of a file.
// Every read (Load, Tail, TailMessages, Scan, ScanTails and
// UpdateMetadata's rewrite) first writes the pending lines of its file
// (of every file for a scan) while holding the lock every flush holds,
// so it never reads a file another goroutine's flush is still writing,
// and sees every append that returned before it. A write that fails
// keeps its lines pending, in front of later ones, and fails the Sync or
// read that wrote them; an append that would pass MaxPending while
// writes fail fails, taking nothing. A process reading the files
// directly sees an append after the next Sync (termserver: within a
// second); a crash loses the pending lines, which the caller's log
// replays.
//
// Load and Scan read files directly and may run beside appends; they see
// only whole lines. [Store.Tail], [Store.TailMessages] and
// [Store.ScanTails] read only a file's metadata line and its last
// records, walking back from the end, so their cost does not grow with the
// age of a session (start-up uses ScanTails, which stops early once the
// tail is settled; the server's dedupe table reads the last messages it
// remembers with TailMessages when it first needs them). They are tolerant: a torn, invalid or over-long
// ([MaxLineSize]) line, a missing metadata line or an empty file is skipped
// or guessed with a warning (logged and kept in [Session.Warnings]), never
// an error.
//
// Only one Store may use a directory at a time.
package session
