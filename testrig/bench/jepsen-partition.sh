#!/usr/bin/env bash
# jepsen-partition.sh — testrig/jepsen's fault schedules (issue 38) with
# network partitions and full NATS disks drawn too: every node in its own
# network namespace, every NATS store on a size-limited tmpfs.
#
# Usage (as root): [TERMLINK_JEPSEN=3] [TERMLINK_JEPSEN_FIRST=1 | TERMLINK_JEPSEN_SEED=N]
#        [TERMLINK_JEPSEN_OUT=dir] [TERMLINK_JEPSEN_DISKFULL=0] testrig/bench/jepsen-partition.sh
#
# The namespaces (keep in step with testrig/jepsen/netfaults.go; the
# names are not cluster-partition.sh's, so both can run at once):
# tlj-n1..3 for the nats-server nodes, tlj-e1..2 the edges, tlj-w1..2
# the workers, each with a veth (c0) on the bridge tljc0, 10.78.0.0/24;
# the edges also have one (d0) on the bridge tljd0, 10.78.1.0/24, where
# the devices reach them. The root namespace has 10.78.0.1 and 10.78.1.1
# (the test process: its devices and its JetStream reads), and no
# routing between the two. A partition fault moves a node's root end
# (NS-c) from tljc0 to tljx0, a third bridge with no address: silently
# dropped packets, carrier up (this kernel has no tc netem); the nodes
# cut off at once share tljx0 (a minority side). The script removes the
# namespaces, veths and bridges on exit, interrupted or not, and
# unmounts any tmpfs left under the output directory (the test unmounts
# its own; a test killed -9 cannot).
#
# The schedules' histories stay in TERMLINK_JEPSEN_OUT (default: a new
# directory under $TMPDIR, printed). Exit 2: not root, or the namespaces
# cannot be made.
set -euo pipefail
cd "$(dirname "$0")/../.."
. testrig/bench/lib.sh

NODES="tlj-n1:10.78.0.11 tlj-n2:10.78.0.12 tlj-n3:10.78.0.13 tlj-e1:10.78.0.21 tlj-e2:10.78.0.22 tlj-w1:10.78.0.31 tlj-w2:10.78.0.32"
EDGES="tlj-e1:10.78.1.21 tlj-e2:10.78.1.22"
out=${TERMLINK_JEPSEN_OUT:-} log= gopid=

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
	for br in tljc0 tljd0 tljx0; do
		ip link show "$br" >/dev/null 2>&1 && ip link del "$br"
	done
	# the NATS stores' tmpfs a killed test left mounted (deepest first)
	if [ -n "$out" ]; then
		awk -v d="$out/" '$3 == "tmpfs" && index($2, d) == 1 { print $2 }' /proc/mounts | sort -r |
			while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
	fi
	[ -n "$log" ] && rm -f "$log"
}

if [ "$(id -u)" != 0 ]; then
	echo "jepsen-partition.sh: needs root (ip netns, veth, bridges, tmpfs mounts); not run" >&2
	exit 2
fi
cleanup # what an earlier run killed with -9 left behind (these names are this script's)
trap cleanup EXIT
trap 'exit 130' INT TERM
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/termlink-jepsen-XXXXXX")
mkdir -p "$out"
out=$(cd "$out" && pwd)
log=$(mktemp)

setup() {
	ip link add tljc0 type bridge && ip link set tljc0 up && ip addr add 10.78.0.1/24 dev tljc0 || return 1
	ip link add tljd0 type bridge && ip link set tljd0 up && ip addr add 10.78.1.1/24 dev tljd0 || return 1
	ip link add tljx0 type bridge && ip link set tljx0 up || return 1
	for nh in $NODES; do
		ns=${nh%%:*} addr=${nh#*:}
		ip netns add "$ns" || return 1
		ip netns exec "$ns" ip link set lo up || return 1
		ip link add "$ns-c" type veth peer name c0 netns "$ns" || return 1
		ip link set "$ns-c" master tljc0 up || return 1
		ip netns exec "$ns" ip addr add "$addr/24" dev c0 || return 1
		ip netns exec "$ns" ip link set c0 up || return 1
	done
	for nh in $EDGES; do
		ns=${nh%%:*} addr=${nh#*:}
		ip link add "$ns-d" type veth peer name d0 netns "$ns" || return 1
		ip link set "$ns-d" master tljd0 up || return 1
		ip netns exec "$ns" ip addr add "$addr/24" dev d0 || return 1
		ip netns exec "$ns" ip link set d0 up || return 1
	done
}
if ! setup; then
	echo "jepsen-partition.sh: cannot make the network namespaces (see above); not run" >&2
	exit 2
fi

echo "load average before: $(loadavg)"
echo "histories in $out"
t0=$(date +%s)
set +e
TERMLINK_JEPSEN_NETNS=1 TERMLINK_JEPSEN_OUT=$out TERMLINK_JEPSEN=${TERMLINK_JEPSEN:-3} \
	setsid go test -count=1 -timeout 0 -v -run '^TestSchedules$' ./testrig/jepsen/ >"$log" 2>&1 &
gopid=$!
wait $gopid # in the background: a signal to this script runs its trap at once
status=$?
gopid=
set -e
cp "$log" "$out/test.log"
# the schedules, the per-seed lines, the notes of the heals and the summary
grep -E -e '^\s+\S+\.go:[0-9]+: (seed [0-9]+: [0-9]+ faults|seed=|partitions|disk_full|schedules:|violations)' \
	-e '^\s+[0-9. ]+s-[0-9. ]+s ' -e 'healed:|disk_full n[0-9]:' -e '^\s+(outside|kill_|pause|partition|disk_full)\s' \
	-e '^\s+(violations by kind|sessions stalled|accept-to-first-run)' -e '^(---|ok|FAIL|PASS)' "$log" || true
echo "load average after: $(loadavg); $(($(date +%s) - t0)) s; full log: $out/test.log"
exit $status
