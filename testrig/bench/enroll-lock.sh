#!/usr/bin/env bash
# enroll-lock.sh SCENARIO [N]
# Issue 22 row 3 (enrollment locked without credentials) against one
# fresh termserver with enrollment on and an operator token:
#   badpolls  5 unknown device_code polls from 127.0.0.1, then the real
#             device's poll, the operator's approval (valid token) and
#             the device collecting its token, all from that address
#   flood     N (default 1100) code requests, one address per /24
#             (127.a.b.1), then a new device's request, the pending count
#             and the count 8 s later (the flood never polls)
#   flood1    N (use 250) code requests from addresses of one /24
# Needs Linux (any 127.x.y.z is local). TERMSERVER=path compares another
# build.
set -euo pipefail
SCEN=${1:?usage: enroll-lock.sh badpolls|flood|flood1 [N]}
N=${2:-1100}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill $SPID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
SPID=
go build -o "$tmp/" ./cmd/termserver ./testrig/bench/enrollflood
TERMSERVER=${TERMSERVER:-$tmp/termserver}
tok=enroll-lock-operator-token-0123456789
sum=$(printf %s "$tok" | sha256sum | cut -d' ' -f1)
port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-)
cat > "$tmp/cfg.json" <<JSON
{"workspace":"$tmp/ws",
 "channels":{"terminal-dev":{"kind":"terminal","mode":"websocket","accountId":"local","config":{"enrollment":true}}},
 "admin":{"tokens":[{"token":"sha256:$sum","role":"operator","name":"op"}]}}
JSON
"$TERMSERVER" --config "$tmp/cfg.json" --listen 127.0.0.1:$port 2>"$tmp/server.log" &
SPID=$!
until curl -sf -o /dev/null 127.0.0.1:$port/healthz; do sleep 0.05; done
"$tmp/enrollflood" -server http://127.0.0.1:$port -token "$tok" -n "$N" "$SCEN"
