#!/usr/bin/env bash
# cluster-faults.sh — does exactly-once and per-session order hold in a
# termserver cluster when a NATS node or a worker dies (issue 22, rows 7
# and 8)? Repeats both scenarios REPS times and counts what must never
# happen.
#
# Usage: [REPS=20] [SCENARIOS=nats,worker] [FAULT_DEVICES=30]
#        [FAULT_SECONDS=24] [TERMLINK_CLUSTER_RACE=1]
#        testrig/bench/cluster-faults.sh
#
# One repetition of a scenario is testrig/cluster's TestFaultRepetition:
# every node is a real process on loopback, as in the cluster's
# end-to-end tests — 3 nats-server nodes (built from the module go.mod
# pins), 2 termserver edges, 2 workers (8 partitions, replicas 3, lease
# 2 s, ack wait 5 s). FAULT_DEVICES link.Client devices (half on each
# edge, the other one as fallback; each keeps up to 16 unacked messages)
# send one message a second each for FAULT_SECONDS; the agent logs each
# run's start. Scenarios:
#   nats    kill -9 of one NATS node after a third of the time, started
#           again after two thirds: the leader of the partition leases'
#           bucket, of the claims' stream (TERMLINK_HIST) or of the inbound
#           stream, in turn
#           (the workers' "lost the lease" lines are counted: leases_lost);
#   worker  kill -9 of worker-1 after a third of the time, as soon as it
#           has started a run (runs last 0.6 s).
# (termrig cluster runs its NATS nodes and termservers inside one
# process, so it cannot kill one of them; the end-to-end harness it is
# built on, testrig/cluster, starts them as processes.)
#
# Counted per repetition, and summed per scenario:
#   double_no_interruption  a message that ran twice with no run_interrupted
#                           record in its history, or ran more than twice
#   out_of_order            a message whose first run started after the
#                           first run of a message its device sent later
#   unanswered, bad_answers a message without its one right answer
#   reruns                  ran twice, interruption recorded (allowed: the
#                           run of a killed or cut-off worker runs again once)
# All but reruns must be 0. One repetition takes about 40-60 s on a
# shared 2-core machine; the load average is printed before and after.
set -euo pipefail
REPS=${REPS:-20}
SCENARIOS=${SCENARIOS:-nats,worker}
cd "$(dirname "$0")/../.."
. testrig/bench/lib.sh
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "load average before: $(loadavg)"
echo "$REPS repetitions of: $SCENARIOS; devices ${FAULT_DEVICES:-30}, ${FAULT_SECONDS:-24} s each"
t0=$(date +%s)
set +e
TERMLINK_FAULTS=$SCENARIOS TERMLINK_FAULTS_OUT=$out FAULT_DEVICES=${FAULT_DEVICES:-30} FAULT_SECONDS=${FAULT_SECONDS:-24} \
	go test -count="$REPS" -timeout 0 -run '^TestFaultRepetition$' ./testrig/cluster/ >"$out.log" 2>&1
status=$?
set -e
cat "$out"
echo "load average after: $(loadavg); $(( $(date +%s) - t0 )) s"
python3 - "$out" <<'PY'
import collections, re, sys
tot = collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    if not line.startswith("scenario="):
        continue
    f = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
    c = tot[f["scenario"]]
    c["repetitions"] += 1
    for k in ("messages", "double_no_interruption", "out_of_order", "unanswered", "bad_answers", "reruns", "leases_lost"):
        c[k] += int(f[k])
for sc, c in sorted(tot.items()):
    print(f"TOTAL {sc}: {c['repetitions']} repetitions, {c['messages']} messages: "
          f"double runs without an interruption record {c['double_no_interruption']}, "
          f"out-of-order first runs {c['out_of_order']}, unanswered {c['unanswered']}, "
          f"bad answers {c['bad_answers']}; reruns with the interruption recorded {c['reruns']}, "
          f"leases lost {c['leases_lost']}")
PY
if [ $status -ne 0 ]; then
	echo "go test failed (status $status); its output:" >&2
	grep -v '^\s*$' "$out.log" | tail -n 60 >&2
fi
rm -f "$out.log"
exit $status
