#!/usr/bin/env bash
# cluster-partition.sh — do exactly-once and per-session order hold in a
# termserver cluster when a NATS node, then an edge, is cut off from the
# rest by the network (not killed), and what does the minority side do
# meanwhile (issue 25, item 6)? Repeats REPS times and sums.
#
# Usage (as root): [REPS=3] [PART_DEVICES=30] [PART_SECONDS=36]
#        [TERMLINK_CLUSTER_RACE=1] testrig/bench/cluster-partition.sh
#
# Every node is a process in its own network namespace (tlp-n1..3 for
# the nats-server nodes, tlp-e1..2 the edges, tlp-w1..2 the workers),
# each with a veth (c0) on the bridge tlpc0, 10.77.0.0/24; the edges also
# have one (d0) on the bridge tlpd0, 10.77.1.0/24, where the devices
# reach them. The root namespace has 10.77.0.1 and 10.77.1.1 (the test
# process: its devices and its JetStream reads), and no routing between
# the two. Every address is inside these namespaces and bridges; the
# script removes all of them on exit, interrupted or not.
#
# One repetition is testrig/cluster's TestPartitionRepetition:
# PART_DEVICES link.Client devices (half on each edge, the other as
# fallback) send one message a second each for PART_SECONDS to an agent
# whose runs last 0.2 s, while
#   a NATS node (the leader of the leases', the claims' or the inbound
#     stream, in turn) is cut off from everyone (its veth leaves the
#     bridge: packets dropped silently, carrier up; this kernel has no
#     tc netem) from 1/12 of the time for a third of it, then healed;
#   edge-1 is cut off from the cluster (its devices still reach it) from
#     7/12 of the time for a third of it, then healed.
# Counted as in cluster-faults.sh: double_no_interruption, out_of_order,
# unanswered, bad_answers (all must be 0) and reruns (ran twice with the
# interruption recorded: allowed); and what each minority side did while
# cut off (messages its devices sent meanwhile that were acked/answered
# before the heal, devices that reconnected, the warnings in its log).
# Exit 2: not root, or the namespaces cannot be made.
set -euo pipefail
REPS=${REPS:-3}
cd "$(dirname "$0")/../.."
. testrig/bench/lib.sh

NODES="tlp-n1:10.77.0.11 tlp-n2:10.77.0.12 tlp-n3:10.77.0.13 tlp-e1:10.77.0.21 tlp-e2:10.77.0.22 tlp-w1:10.77.0.31 tlp-w2:10.77.0.32"
EDGES="tlp-e1:10.77.1.21 tlp-e2:10.77.1.22"
out= gopid=

cleanup() {
	set +e
	# go test and its test binary: the process group setsid made for them
	[ -n "$gopid" ] && kill -TERM -- "-$gopid" 2>/dev/null && sleep 1 && kill -KILL -- "-$gopid" 2>/dev/null
	for nh in $NODES; do
		ns=${nh%%:*}
		if ip netns list | grep -qw "^$ns"; then
			# only processes inside this script's namespaces (the nodes)
			for pid in $(ip netns pids "$ns"); do kill -9 "$pid" 2>/dev/null; done
			ip netns del "$ns"
		fi
	done
	# the veths (the kernel frees a namespace's devices later, not at once)
	for nh in $NODES $EDGES; do
		for end in c d; do
			ip link show "${nh%%:*}-$end" >/dev/null 2>&1 && ip link del "${nh%%:*}-$end" 2>/dev/null
		done
	done
	for br in tlpc0 tlpd0; do
		ip link show "$br" >/dev/null 2>&1 && ip link del "$br"
	done
	[ -n "$out" ] && rm -f "$out" "$out.log"
}

if [ "$(id -u)" != 0 ]; then
	echo "cluster-partition.sh: needs root (ip netns, veth, bridges); not run" >&2
	exit 2
fi
cleanup # what an earlier run killed with -9 left behind (these names are this script's)
trap cleanup EXIT
trap 'exit 130' INT TERM
out=$(mktemp)

setup() {
	ip link add tlpc0 type bridge && ip link set tlpc0 up && ip addr add 10.77.0.1/24 dev tlpc0 || return 1
	ip link add tlpd0 type bridge && ip link set tlpd0 up && ip addr add 10.77.1.1/24 dev tlpd0 || return 1
	for nh in $NODES; do
		ns=${nh%%:*} addr=${nh#*:}
		ip netns add "$ns" || return 1
		ip netns exec "$ns" ip link set lo up || return 1
		ip link add "$ns-c" type veth peer name c0 netns "$ns" || return 1
		ip link set "$ns-c" master tlpc0 up || return 1
		ip netns exec "$ns" ip addr add "$addr/24" dev c0 || return 1
		ip netns exec "$ns" ip link set c0 up || return 1
	done
	for nh in $EDGES; do
		ns=${nh%%:*} addr=${nh#*:}
		ip link add "$ns-d" type veth peer name d0 netns "$ns" || return 1
		ip link set "$ns-d" master tlpd0 up || return 1
		ip netns exec "$ns" ip addr add "$addr/24" dev d0 || return 1
		ip netns exec "$ns" ip link set d0 up || return 1
	done
}
if ! setup; then
	echo "cluster-partition.sh: cannot make the network namespaces (see above); not run" >&2
	exit 2
fi

echo "load average before: $(loadavg)"
echo "$REPS repetitions; devices ${PART_DEVICES:-30}, ${PART_SECONDS:-36} s each"
t0=$(date +%s)
set +e
TERMLINK_NETNS=1 TERMLINK_PARTITION_OUT=$out PART_DEVICES=${PART_DEVICES:-30} PART_SECONDS=${PART_SECONDS:-36} \
	setsid go test -count="$REPS" -timeout 0 -run '^TestPartitionRepetition$' ./testrig/cluster/ >"$out.log" 2>&1 &
gopid=$!
wait $gopid # in the background: a signal to this script runs its trap at once
status=$?
gopid=
set -e
cat "$out"
echo "load average after: $(loadavg); $(($(date +%s) - t0)) s"
python3 - "$out" <<'PY'
import collections, re, sys
c = collections.Counter()
for line in open(sys.argv[1]):
    if not line.startswith("scenario="):
        continue
    f = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
    c["repetitions"] += 1
    for k in ("messages", "double_no_interruption", "out_of_order", "unanswered", "bad_answers", "reruns",
              "nats_cut_sent", "nats_cut_acked_in_cut", "nats_cut_answered_in_cut",
              "edge_cut_sent", "edge_cut_acked_in_cut", "edge_cut_answered_in_cut"):
        c[k] += int(f[k])
    c["edge_cut_devices_reconnected"] += int(f["edge_cut_devices_reconnected"].split("/")[0])
    c["edge_cut_devices"] += int(f["edge_cut_devices_reconnected"].split("/")[1])
print(f"TOTAL partition: {c['repetitions']} repetitions, {c['messages']} messages: "
      f"double runs without an interruption record {c['double_no_interruption']}, "
      f"out-of-order first runs {c['out_of_order']}, unanswered {c['unanswered']}, "
      f"bad answers {c['bad_answers']}; reruns with the interruption recorded {c['reruns']}")
print(f"TOTAL NATS node cut off: of {c['nats_cut_sent']} messages sent during the cuts, "
      f"{c['nats_cut_acked_in_cut']} acked and {c['nats_cut_answered_in_cut']} answered before the heal")
print(f"TOTAL edge-1 cut off from the cluster: of {c['edge_cut_sent']} messages its devices sent during the cuts, "
      f"{c['edge_cut_acked_in_cut']} acked and {c['edge_cut_answered_in_cut']} answered before the heal; "
      f"{c['edge_cut_devices_reconnected']} of {c['edge_cut_devices']} device-cuts reconnected")
PY
if [ $status -ne 0 ]; then
	echo "go test failed (status $status); its output:" >&2
	grep -v -e '^\s*$' -e '^\s*\[[0-9]' "$out.log" | tail -n 80 >&2
fi
exit $status
