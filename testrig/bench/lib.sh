# lib.sh — helpers the bench scripts share (sourced, not run). They use
# the caller's globals: $tmp (scratch dir holding the termrig binary and
# the report), $URL (the --server value), $round, $srv and $results.

# load ARGS...: runs termrig load against URL (one or several servers),
# JSON report in $tmp/rep.json (the exit status is ignored: lost messages
# at saturation are expected).
load() {
	"$tmp/termrig" load --server "$URL" --connect-rate 2000 --json "$@" >"$tmp/rep.json" 2>"$tmp/load.err" || true
	[ -s "$tmp/rep.json" ] || { echo "termrig load $*: no report" >&2; cat "$tmp/load.err" >&2; exit 1; }
}

# field EXPR: a Python expression over the report r.
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($1)" "$tmp/rep.json"; }

# record NAME VALUE: one result row of this round and server.
record() { printf '%s\t%s\t%s\t%s\n' "$round" "$srv" "$1" "$2" >>"$results"; }

# loadavg: the 1, 5 and 15 minute load averages.
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
