// Package jepsen checks the cluster's promises the way Jepsen checks
// databases (issue 38): a nemesis draws a fault schedule from a seed,
// real processes run it while devices record every send, ack, refusal,
// resend and reply and an agent records every run with its node, and a
// checker reads the history.
//
// # What it checks
//
// Check (checker.go) is a pure function of a history (history.go: one
// JSON line per event, one file per schedule). Per message it reports
//
//	lost         acked (stored) by the cluster and never answered
//	run_twice    run twice with no run_interrupted record for it in the
//	             cluster's history stream (TERMLINK_HIST), or run more
//	             than twice
//	order        its first run started after the first run of a message
//	             of its session (device) that was accepted after it (the
//	             order of the device's first acks)
//	bad_reply    a reply that is not the agent's answer to the message's
//	             text ("You said: <text>"), or a reply to a message never
//	             sent
//	phantom_run  a run of a text no device sent
//
// and the accept-to-first-run latency (first ack to first run start;
// 0 when the run started before the device saw its ack) as p50/p99/max,
// for messages accepted outside every fault window and inside each fault
// kind's (kill_nats, kill_edge, kill_worker, pause); a window runs from
// the fault to the moment the node is back (restarted and answering, or
// continued). A message accepted during two faults counts in both.
//
// Interruptions are observable from outside: after a schedule the runner
// reads TERMLINK_HIST and adds an "interrupted" event for every message
// with a run_interrupted record. Runs come from the recording agent's run
// log (a line at each run's start and end with the worker's workspace,
// so the node). Resends are inferred: each message sent on one
// connection and still unanswered when the device connects again is
// resent (link.Client sends every unanswered message at each connect);
// busy refusals come from the client's debug log line, other refusals
// are its non-final error events.
//
// # The nemesis
//
// Generate (nemesis.go) draws, from a seed (a PCG), faults over 36 s:
// kill -9 of a NATS node, an edge or a worker and its restart 3-10 s
// later, or SIGSTOP of any node and SIGCONT after 1.5-4 leases (the
// runner's lease is 2 s). A node has one fault at a time, at most one
// edge and one worker are down at once, and at most a minority of the
// NATS nodes (1 of 3); with NemesisOptions.AllowMajority a fault past
// that is drawn and its Note says it is beyond what JetStream promises,
// which the report repeats (BEYOND_JETSTREAM_PROMISE) and TestSchedules
// does not count as a failure. Network partitions and slow or full
// disks are not drawn yet.
//
// # Running it
//
// TestSchedules is a benchmark, skipped unless asked for (never part of
// make test). It builds termserver and nats-server, and for each seed
// starts 3 nats-server nodes, 2 edges and 2 workers as processes (8
// partitions, replicas 3, lease 2 s, ack wait 5 s) with the recording
// agent (0.3 s a run), 20 devices each sending bursts of 3 messages
// every 3 s (several in flight), applies the schedule, waits until every
// message is answered (at most 90 s after the faults), and checks. It
// logs a line per schedule with its violations and a summary table.
//
//	TERMLINK_JEPSEN=100 go test -run TestSchedules -timeout 0 ./testrig/jepsen
//
// runs seeds 1-100 (TERMLINK_JEPSEN_FIRST=K: seeds K..K+99), about a
// minute each. Each schedule's files (history.jsonl, runs.log, the
// termserver logs) go to TERMLINK_JEPSEN_OUT/seed-N (default: a new
// directory under $TMPDIR, named in the log). A failing schedule is
// replayed from its seed:
//
//	TERMLINK_JEPSEN_SEED=17 go test -run TestSchedules -timeout 0 -v ./testrig/jepsen
//
// Replaying gives the same faults at the same times; what the processes
// do in between is up to the machine, so a violation may need a few
// replays to show again.
package jepsen
