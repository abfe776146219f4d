#!/usr/bin/env bash
# bench/startup.sh [RUNS]: start-up of the command line, whole processes, as
# ratios to a floor measured in the same run: bench/floor, a Go program that
# only reads and decodes the same JSON file. Cases: `version` and `validate`
# of {"version":1} against the floor on that file, `validate` of the largest
# valid document (1,000 items in every list, from internal/fleet's benchmark
# generator) against the floor on that one. Goals: version at most 2x,
# validate largest at most 2.5x (exit 1 when over).
#
# Timing is bench/stopwatch (Go, no tool to install): RUNS rounds, after 3
# warm-up rounds, each running every case once; a ratio is the median over
# the rounds of the case's time over its floor's in the same round, so that
# the busy spells of a shared machine fall on both sides of it. Wall-time
# ratios are judged against the goals; CPU (user + system) ratios are
# printed beside them. Binaries are built as `make build` builds them
# (CGO_ENABLED=0, -trimpath, -s -w).
# Last, the package initialisers that every command pays before it reads a
# byte (GODEBUG=inittrace=1 of `version`).
set -euo pipefail
RUNS=${1:-30}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cd "$ROOT"
make -s build BIN="$D/fleet-agent" >/dev/null
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$D/floor" ./bench/floor
go build -o "$D/stopwatch" ./bench/stopwatch
printf '{"version":1}\n' >"$D/tiny.json"
go test -count=1 -run '^TestLargeDocumentIsValid$' ./internal/fleet -args -write-large "$D/largest.json" >/dev/null
"$D/fleet-agent" validate "$D/tiny.json" "$D/largest.json" >/dev/null
echo "largest document: $(wc -c <"$D/largest.json") bytes; $(nproc) cores"
status=0
"$D/stopwatch" -runs "$RUNS" \
  "floor tiny|||$D/floor $D/tiny.json" \
  "floor largest|||$D/floor $D/largest.json" \
  "version|floor tiny|2|$D/fleet-agent version" \
  "validate tiny|floor tiny||$D/fleet-agent validate $D/tiny.json" \
  "validate largest|floor largest|2.5|$D/fleet-agent validate $D/largest.json" || status=$?
# Each initialiser's fastest of 10 runs: one run on a busy machine says
# more about the machine than about the package.
for _ in 1 2 3 4 5 6 7 8 9 10; do
  GODEBUG=inittrace=1 "$D/fleet-agent" version 2>&1 >/dev/null | awk '/^init / { print $2, $5 }'
done | awk '{ if (!($1 in m) || $2 < m[$1]) m[$1] = $2 } END { for (p in m) print m[p], p }' | sort -rn >"$D/inits"
awk '{ n++; t += $1 } END { printf "package initialisers of version (fastest of 10 runs each): %d packages, %.2f ms in all; the heaviest:\n", n, t }' "$D/inits"
head -8 "$D/inits" | awk '{ printf "  %6.2f ms  %s\n", $1, $2 }'
exit $status
