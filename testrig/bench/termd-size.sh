#!/usr/bin/env bash
# termd-size.sh [TOP] [BINARY]
# What termd for a Raspberry Pi Zero/1 (linux/arm/6) holds, by package:
# builds ./cmd/termd as make pi does but keeping the symbol table (no -s),
# sums `go tool nm -size` by package (a symbol's package is its name up
# to the first dot after the last slash: "net/http.(*Client).Do" is
# net/http; "type:*net/http.Client" and "go:itab.*net/http.x,io.Reader"
# count under the package their name continues with; the functions'
# metadata under "go:func", linker symbols without a package under
# "(runtime/linker)"; .bss takes no bytes of the file and is left out)
# and prints the TOP (default 30) by bytes, the packages summed by module,
# then the sizes of the binary as make pi ships it (-trimpath -ldflags
# "-s -w") and with the symbol table and DWARF.
# BINARY: measure that binary instead of building one (it must keep its
# symbol table: no -s); GOARCH/GOARM/GOOS in the environment change the
# target. Needs readelf (binutils).
# TERMD_TAGS: the build tags (default nethttpomithttp2, as make pi
# builds termd; TERMD_TAGS= for none, to compare).
set -euo pipefail
TOP=${1:-30}
TAGS=${TERMD_TAGS-nethttpomithttp2}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOOS=${GOOS:-linux} GOARCH=${GOARCH:-arm}
[ "$GOARCH" = arm ] && export GOARM=${GOARM:-6}
ver=$(git describe --always --dirty 2>/dev/null || echo devel)
if [ -n "${2:-}" ]; then
	bin=$2
else
	bin=$tmp/termd
	go build -trimpath -tags "$TAGS" -ldflags "-X main.version=$ver" -o "$bin" ./cmd/termd
	go build -trimpath -tags "$TAGS" -ldflags "-s -w -X main.version=$ver" -o "$tmp/termd-sw" ./cmd/termd
fi
# Symbols at or past the start of .bss (.bss, .noptrbss) take no bytes of
# the file (crypto/internal/fips140/drbg.memory alone is 32 MiB of it).
bss=$(readelf -SW "$bin" | awk '$0 ~ /[.]bss / {for (i = 1; i <= NF; i++) if ($i == "NOBITS") {print $(i + 1); exit}}')
[ -n "$bss" ] || { echo "termd-size: no .bss in $bin (readelf -SW, binutils)" >&2; exit 1; }
# A package's module, for the second table: termlink's own, the
# standard library's ("std": what go list gives no module), or a
# dependency's.
go list -tags "$TAGS" -deps -f '{{.ImportPath}} {{with .Module}}{{.Path}}{{else}}std{{end}}' ./cmd/termd | sed 's/^/module /' >"$tmp/mods"
{ cat "$tmp/mods"; go tool nm -size -sort size "$bin"; } | awk -v top="$TOP" -v bss="$bss" '
	function hex(s,   i, n, c) { n = 0; s = tolower(s); for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)); n = n * 16 + c - 1 }; return n }
	BEGIN { bssAt = hex(bss) }
	# go tool nm: ADDRESS SIZE TYPE NAME (NAME may hold spaces).
	# Lines from go list (first): "module PACKAGE MODULE".
	$1 == "module" && NF == 3 { mod[$2] = $3; next }
	NF >= 4 && hex($1) < bssAt {
		size = $2; name = $4; for (i = 5; i <= NF; i++) name = name " " $i
		sub(/^(type:\*?|go:itab\.\*?|go:link\.pkghash\.|go:info\.|gclocals·)/, "", name)
		slash = 0; n = length(name)
		for (i = 1; i <= n; i++) { c = substr(name, i, 1); if (c == "/") slash = i; if (c == "(" || c == "[" || c == " " || c == ",") break }
		rest = substr(name, slash + 1); dot = index(rest, ".")
		pkg = dot > 1 ? substr(name, 1, slash + dot - 1) : "(runtime/linker)"
		sum[pkg] += size; total += size
	}
	END {
		print "bytes\tpackage (the top " top ")"
		for (p in sum) printf "%d\t%s\n", sum[p], p | "sort -rn | head -n " top
		close("sort -rn | head -n " top)
		printf "%d\t(all %d packages: their symbols'"'"' bytes in the file; the function table (.gopclntab, about half as much again) is not counted)\n", total, length(sum)
		# A package the tree no longer builds (BINARY from another
		# commit): the longest module path it starts with, else std.
		for (p in mod) mods[mod[p]] = 1
		for (p in sum) {
			if (p in mod) m = mod[p]
			else { m = p ~ /^termlink\// ? "termlink" : "std"; for (c in mods) if (c != "std" && index(p "/", c "/") == 1 && (m == "std" || length(c) > length(m))) m = c }
			bymod[m] += sum[p]
		}
		print "\nbytes\tmodule (std: the standard library, runtime and linker tables)"
		for (m in bymod) printf "%d\t%s\n", bymod[m], m | "sort -rn"
		close("sort -rn")
	}'
echo
target="$GOOS/$GOARCH${GOARM:+ GOARM=$GOARM}"
echo "binary ($target): $(stat -c %s "$bin") bytes with symbols and DWARF"
[ -f "$tmp/termd-sw" ] && echo "binary ($target): $(stat -c %s "$tmp/termd-sw") bytes as make pi ships it (-trimpath -tags \"$TAGS\" -ldflags \"-s -w\")"
echo "packages in the build of the tree: $(wc -l <"$tmp/mods") (go list -deps ./cmd/termd)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
