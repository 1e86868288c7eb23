# shellcheck shell=bash
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

# natsnode: prints the path of a nats-server binary of the version go.mod
# pins, built once into the cache testrig/cluster uses
# (${XDG_CACHE_HOME:-~/.cache}/termlink/natsnode-VERSION/natsnode; not
# named nats-server, so that someone's `pkill -f nats-server` leaves it
# alone). The build reads a copy of go.mod and go.sum (-modfile), so a
# go.sum without the entries of nats-server's main package (it imports
# go.uber.org/automaxprocs, which termlink does not) is not changed.
natsnode() {
	local v dir m
	v=$(go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
	dir=${XDG_CACHE_HOME:-$HOME/.cache}/termlink/natsnode-$v
	if [ ! -x "$dir/natsnode" ]; then
		mkdir -p "$dir"
		m=$(mktemp -d)
		cp go.mod "$m/nats.mod"
		cp go.sum "$m/nats.sum"
		go build -mod=mod -modfile="$m/nats.mod" -o "$dir/natsnode.$$" github.com/nats-io/nats-server/v2 >&2 &&
			mv "$dir/natsnode.$$" "$dir/natsnode"
		rm -rf "$m"
	fi
	echo "$dir/natsnode"
}
