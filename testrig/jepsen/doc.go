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
// kind's (kill_nats, kill_edge, kill_worker, pause, partition,
// disk_full); a window runs from the fault to the moment the node is
// back (restarted and answering, continued, back on the network, or its
// store's filler removed and, if need be, the node restarted; a NATS
// node, then also until its /healthz says ok, at most 30 s). A message
// accepted during two faults counts in both.
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
// does not count as a failure.
//
// Two more kinds are drawn only when the run is set up for them
// (NemesisOptions.Partitions, DiskFull; without them a seed draws the
// schedule it drew before they existed):
//
//	partition  any node cut off from the cluster's network for 1.5-5
//	           leases, then put back. The nodes run in network namespaces
//	           (netfaults.go: tlj-*, made by testrig/bench/jepsen-partition.sh
//	           as root); the cut moves the node's veth from the bridge
//	           tljc0 to tljx0 (packets dropped silently, carrier up: this
//	           kernel has no tc netem). Nodes cut off at once share tljx0:
//	           a minority side. An edge cut off still has its devices.
//	disk_full  a NATS node's store (each on a tmpfs of 1 GiB, as root)
//	           filled with a filler file for 3-10 s, then the filler
//	           removed. nats-server disables JetStream for good when a
//	           write finds no space; the heal then restarts the node, and
//	           its fault_end event says so.
//
// The minority rule counts every fault on a NATS node (down, paused, cut
// off, disk full), and the node as faulted for NemesisOptions.CatchUp
// (10 s) after it is back: a node just restarted has not rejoined its
// raft groups yet, and a second node's loss then is a majority's in
// practice (seed 3 with partitions, before the margin: about 12 s with
// nothing accepted). The runner also asks nats-server: a fault on a NATS
// node that starts while another NATS node's /healthz is not ok (down,
// cut off, or back but still catching up: a node back from a full disk
// took up to 90 s) is noted beyond what JetStream promises, with what
// /healthz said. Slow disks are not drawn (no way here to slow one
// file system: no dm-delay, no netem).
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
// draws full disks when run as root (TERMLINK_JEPSEN_DISKFULL=0: not),
// partitions only with TERMLINK_JEPSEN_NETNS=1 and the namespaces:
//
//	TERMLINK_JEPSEN=3 testrig/bench/jepsen-partition.sh
//
// The test log says which are drawn, or why not.
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
