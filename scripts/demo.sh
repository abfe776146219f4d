#!/usr/bin/env bash
# make demo: runs fleet-agent on embedded defaults and checks what it shows.
# Everything happens under ./demo (recreated on each run). Exits non-zero if
# anything did not hold.
set -euo pipefail
BIN=${1:-bin/fleet-agent}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEMO="$ROOT/demo"
rm -rf "$DEMO"
mkdir -p "$DEMO"
export FLEET_AGENT_STATE="$DEMO/fleet.db"
unset FLEET_AGENT_CONFIG
failures=0
check() { # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "  ok: $what"; else echo "  FAILED: $what"; failures=$((failures + 1)); fi
}
step() { printf '\n== %s\n' "$*"; }

step "validate the example documents of the references"
for f in "$ROOT"/testdata/documents/valid/*.json; do
  check "$(basename "$f") is valid" "$BIN" validate "$f"
done
step "an invalid document is refused with pointers"
out=$("$BIN" validate "$ROOT/testdata/documents/invalid/unknown-field.json" 2>&1 || true)
echo "$out" | sed 's/^/    /'
check "the unknown field is named by its pointer" grep -q '/pools/0/colour: unknown field' <<<"$out"

step "plan the fleet-config example against an empty fleet"
"$BIN" plan "$ROOT/testdata/documents/valid/fleet-config.json" | sed 's/^/    /'
check "nothing was written by plan" test ! -e "$FLEET_AGENT_STATE"

step "apply it (--yes) into $FLEET_AGENT_STATE"
"$BIN" apply "$ROOT/testdata/documents/valid/fleet-config.json" --yes | sed 's/^/    /'
check "the state file exists with mode 0600" test "$(stat -c %a "$FLEET_AGENT_STATE")" = 600

step "plan again: nothing to change"
check "plan --fail-on-drift passes" "$BIN" plan "$ROOT/testdata/documents/valid/fleet-config.json" --fail-on-drift

step "export the fleet and plan the export with prune"
"$BIN" export --out "$DEMO/exported.json"
check "the export plans empty with prune" "$BIN" plan "$DEMO/exported.json" --prune --fail-on-drift

step "status"
"$BIN" status | sed 's/^/    /'

echo
if [ "$failures" -gt 0 ]; then
  echo "demo: $failures check(s) FAILED"
  exit 1
fi
echo "demo: every check held"
