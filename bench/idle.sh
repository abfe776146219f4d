#!/usr/bin/env bash
# bench/idle.sh [MINUTES]: idle resident memory and CPU of `fleet-agent run`
# at a 1-minute interval (goal: at most 40 MB and 0.1% of a core). The agent
# follows a local repository with a small fleet applied, the fake provider,
# no GitHub; nothing moves while it is measured.
set -euo pipefail
MIN=${1:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/bin/fleet-agent"
[ -x "$BIN" ] || make -C "$ROOT" build >/dev/null
D=$(mktemp -d)
trap 'kill $PID 2>/dev/null || true; rm -rf "$D"' EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@example.com GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@example.com
git init -q --bare -b main "$D/remote.git"
git clone -q "$D/remote.git" "$D/work" 2>/dev/null
cp "$ROOT/testdata/documents/valid/fleet-config.json" "$D/work/fleet.json"
(cd "$D/work" && git checkout -q -b main && git add . && git commit -qm seed && git push -q origin main)
cat >"$D/config.yaml" <<CFG
git: { url: $D/remote.git, interval: 1m }
state: $D/state/fleet.db
socket: $D/api.sock
listen: 127.0.0.1:0
apply: { requireReviewedPlan: false }
providers: { fake: { statePath: $D/fake.json } }
CFG
"$BIN" run --config "$D/config.yaml" --log-level warn 2>"$D/agent.log" &
PID=$!
sleep 5 # start-up and the first apply are not idle
read -r u0 s0 < <(awk '{print $14, $15}' /proc/$PID/stat)
t0=$(date +%s.%N)
sleep $((MIN * 60))
read -r u1 s1 < <(awk '{print $14, $15}' /proc/$PID/stat)
t1=$(date +%s.%N)
hz=$(getconf CLK_TCK)
rss=$(awk '/VmRSS/ {print $2}' /proc/$PID/status)
hwm=$(awk '/VmHWM/ {print $2}' /proc/$PID/status)
awk -v u0="$u0" -v s0="$s0" -v u1="$u1" -v s1="$s1" -v t0="$t0" -v t1="$t1" -v hz="$hz" -v rss="$rss" -v hwm="$hwm" -v min="$MIN" 'BEGIN {
  cpu = (u1 + s1 - u0 - s0) / hz; el = t1 - t0;
  printf "idle %d min at a 1m interval: RSS %.1f MB (peak %.1f MB; goal 40 MB, %.2fx), CPU %.4f%% of a core (goal 0.1%%, %.2fx)\n",
    min, rss / 1024, hwm / 1024, rss / 1024 / 40, 100 * cpu / el, (100 * cpu / el) / 0.1 }'
