#!/usr/bin/env bash
# stream.sh [DEVICES] [RATE] [ROUNDS]
# Streamed replies (issue 27). termserver's echo agent writes its answer
# word by word (streamWordMs 100: 22 words, 2.1 s a run); DEVICES lean
# devices (1,000) send RATE messages/s (48: about 100 runs streaming at
# once) for 15 s, in rounds alternating devices that list `stream` and
# devices that do not (the same agent, the same 2.1 s a run). Per round:
# the time from a message to its first delta (p50/p90/p99; the echo agent
# writes its first word as its run starts, so this is the agent's first
# chunk to the device, plus the ack and the run's start), the ack p50 for
# scale, the deltas per run, and the server's CPU per reply. CPU per delta
# = (CPU per streamed reply - CPU per plain reply) / deltas per run.
# Then the coalescing: the scripted ACP agent writes 1,000 tiny chunks at
# once (/chunks 1000) and 1,000 words 2 ms apart (/stream 2 ...), 10
# devices; the deltas per run show what the 125 ms gap keeps of them.
set -euo pipefail
D=${1:-1000}
RATE=${2:-48}
R=${3:-3}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill $SPID $APID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./cmd/termserver ./cmd/termrig ./testrig/agents/acpagent
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local"}},
 "agents":{"echo":{"builtin":"echo","streamWordMs":100}}}
JSON
"$tmp/termserver" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
SPID=$!
until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.05; done
URL=ws://127.0.0.1:$port/api/channels/terminal-dev/ws
source testrig/bench/lib.sh
text="one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"
echo "load average $(loadavg)"
echo "== warm-up: $D devices, one message each"
load --devices "$D" --rate "$D" --duration 1s --peer-prefix s --text hi --drain 10s
printf 'round\tmode\tfirst_delta_p50\tp90\tp99\tack_p50\tdeltas_per_run\tcpu_us_per_reply\treplied\tlost\twrong\n'
for round in $(seq "$R"); do
  for mode in stream plain; do
    flag=""; [ "$mode" = stream ] && flag=--stream
    load --devices "$D" --rate "$RATE" --duration 15s --drain 10s --peer-prefix s --text "$text" --server-pid "$SPID" $flag
    printf '%s\t%s\t%s\n' "$round" "$mode" "$(field '"\t".join(str(x) for x in [round(r["first_delta_ms"]["p50"],1), round(r["first_delta_ms"]["p90"],1), round(r["first_delta_ms"]["p99"],1), round(r["ack_ms"]["p50"],2), round(r.get("deltas_per_run",0),1), round(r.get("server_cpu_per_reply_us",0),1), r["replied"], r["lost"], r.get("delta_gaps",0)+r.get("late_deltas",0)+r.get("delta_mismatches",0)])')"
  done
done
echo "load average $(loadavg)"
kill $SPID; wait $SPID 2>/dev/null || true

port=$((20000 + RANDOM % 12000))
cat > "$tmp/acp.json" <<JSON
{"workspace":"$tmp/ws2","channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","agent":"coder"}},
 "agents":{"coder":{"acp":{"command":"$tmp/acpagent","args":[],"maxProcesses":16}}}}
JSON
"$tmp/termserver" --config "$tmp/acp.json" --listen 127.0.0.1:$port 2>"$tmp/acp.log" &
APID=$!
until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.05; done
URL=ws://127.0.0.1:$port/api/channels/terminal-dev/ws
words=$(seq -s ' ' 1 1000)
printf 'agent\tdeltas_per_run\tmax\tfirst_delta_p50\treplied\twrong\n'
for what in "/chunks 1000" "/stream 2 $words"; do
  load --devices 10 --rate 5 --duration 4s --drain 20s --peer-prefix a --text "$what" --stream
  printf '%s\t%s\n' "${what:0:12}" "$(field '"\t".join(str(x) for x in [round(r.get("deltas_per_run",0),1), r.get("max_deltas_per_run",0), round(r["first_delta_ms"]["p50"],1), r["replied"], r.get("delta_gaps",0)+r.get("late_deltas",0)+r.get("delta_mismatches",0)])')"
done
echo "load average $(loadavg)"
