#!/usr/bin/env bash
# make demo: the agent on embedded defaults (a local git repository, the fake
# provider, a bbolt file, no GitHub), driven the way an operator would, and
# checked at every step. Everything happens under ./demo, recreated on each
# run. Exits non-zero if anything did not hold. When this machine has the
# Kubernetes control plane cache (make kube), a real control plane stands
# behind the fake provider's clusters (internal/testutil/kubeplane/demoplane)
# and the Kubernetes pool's Nodes run the node daemon and join.
set -euo pipefail
BIN=${1:-bin/fleet-agent}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEMO="$ROOT/demo"
START=$(date +%s)

# A private, repeatable git.
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME="Dana Demo" GIT_AUTHOR_EMAIL=dana@example.com
export GIT_COMMITTER_NAME="Dana Demo" GIT_COMMITTER_EMAIL=dana@example.com
unset FLEET_AGENT_STATE FLEET_AGENT_CONFIG
export FLEET_AGENT_CONFIG="$DEMO/config.yaml"

failures=0
checks=0
ok() { checks=$((checks + 1)); echo "  ok: $*"; }
bad() { checks=$((checks + 1)); failures=$((failures + 1)); echo "  FAILED: $*"; }
check() { # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$what"; fi
}
step() { printf '\n== %s\n' "$*"; }
show() { sed 's/^/    /'; }
# wait_for DESCRIPTION SECONDS COMMAND...: retries the command until it succeeds.
wait_for() {
  local what=$1 limit=$2; shift 2
  local deadline=$(($(date +%s) + limit))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then bad "$what (waited ${limit}s)"; return 1; fi
    sleep 0.2
  done
  ok "$what"
}

AGENT_PID=
PLANE_PID=
# stop_plane: the control plane helper stops its node daemons and its
# components on SIGTERM (a component gets SIGKILL after 10 s); bounded here
# at 60 s, then it is killed.
stop_plane() {
  [ -n "$PLANE_PID" ] || return 0
  local pid=$PLANE_PID rc=0 i=0
  PLANE_PID=
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 300 ]; do sleep 0.2; i=$((i + 1)); done
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; rc=1; fi
  wait "$pid" 2>/dev/null || rc=1
  return "$rc"
}
cleanup() {
  [ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null
  stop_plane || true
}
trap cleanup EXIT

# starts: how many times an agent logged its start (the line comes once its
# socket and ops listener serve).
starts() { grep -c '"fleet-agent running"' "$DEMO/agent.log" 2>/dev/null || true; }
start_agent() {
  local before; before=$(starts)
  "$BIN" run --config "$DEMO/config.yaml" >>"$DEMO/agent.log" 2>&1 &
  AGENT_PID=$!
  # Wait for the agent's own start line before asking it anything: a
  # command run while no agent serves the socket opens the state file
  # itself, and a slow one (a loaded machine) can hold it past the starting
  # agent's lock timeout, which then exits "in use".
  started() { [ "$(starts)" -gt "${before:-0}" ]; }
  wait_for "the agent has started" 20 started
  wait_for "the agent answers on its socket" 20 "$BIN" status
}

# The page for people (/ui/ on the ops listener). The demo's listen is
# 127.0.0.1:0, so the address is read from the agent's start line.
ops_addr() { grep '"fleet-agent running"' "$DEMO/agent.log" | tail -1 | sed -n 's/.*"listen":"\([^"]*\)".*/\1/p'; }
page_url() { echo "http://$(ops_addr)/ui/"; }
# page_get PATH: the page's HTML, with bash alone (no curl on a fresh machine).
page_get() {
  local addr; addr=$(ops_addr)
  exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}" || return 1
  printf 'GET /ui/%s HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" "$addr" >&3
  cat <&3
  exec 3<&-
}
page_has() { page_get "$1" | grep -q "$2"; } # page_has PATH TEXT

applied_commit() { "$BIN" status -o json | sed -n 's/.*"commit": "\([0-9a-f]*\)".*/\1/p' | head -1; }
is_applied() { [ "$(applied_commit)" = "$1" ]; }
has_proposal() { "$BIN" status -o json | grep -q "\"ref\": \"refs/heads/$1\""; }
drifted() { ! "$BIN" status --fail-on-drift; }
refused() { "$BIN" status | grep -q "^refused: commit ${1:0:7}"; }
applies_of() { "$BIN" audit -o json | tr -d ' \n' | grep -o '"action":"apply"[^}]*"commit":"'"$1"'"' | wc -l; }

write_doc() { # write_doc VCPU GPU_QUOTA [SUBSTRATE_FLAVORS [VERSION]]: with flavors, a Kubernetes-backed pool too
  local k8s=""
  if [ -n "${3:-}" ]; then
    k8s=$(cat <<EOK
,
    {
      "name": "k8s",
      "site": "lab",
      "class": "metal-host",
      "gpuModel": "H100",
      "policy": {
        "substrate": {
          "kind": "kubernetes",
          "account": "sim",
          "cluster": { "create": { "location": "fake-east", "version": "${4:-1.34}" } },
          "flavors": [$3]
        }
      }
    }
EOK
)
  fi
  cat >"$DEMO/work/fleet.json" <<EOF
{
  "version": 1,
  "sites": [{ "name": "lab", "kind": "shared", "region": "local" }],
  "providerAccounts": [{ "name": "sim", "provider": "fake", "config": {} }],
  "pools": [
    {
      "name": "gpu",
      "site": "lab",
      "class": "provider",
      "providerAccount": "sim",
      "gpuModel": "H100",
      "ownerQuota": { "gpu": $2 },
      "offers": [{ "tenant": "acme", "quota": { "gpu": 2 }, "priority": 5 }]
    }$k8s
  ],
  "flavors": [{ "pool": "gpu", "name": "small", "vcpu": $1, "memoryGiB": 16, "diskGiB": 100, "gpus": 1 }]
}
EOF
}

# The substrate of the pool k8s, as `fleet-agent substrates -o json` says it,
# without white space; and what the fake provider holds (its own state file).
substrate_is() { "$BIN" substrates -o json | tr -d ' \n' | grep -q "$1"; }
fake_count() { grep -c "$1" "$DEMO/state/fake.json" || true; }
ms() { echo $(($(date +%s%N) / 1000000)); } # the wall clock in milliseconds
# propose_and_merge BRANCH MESSAGE: push the working copy's fleet.json on a
# branch, wait for its plan, merge it and wait for the apply.
propose_and_merge() { propose "$1" "$2"; merge "$1"; }
propose() { # propose BRANCH MESSAGE
  git checkout -q -b "$1"
  git commit -qam "$2" && git push -q origin "$1"
  wait_for "the proposal $1 is planned" 20 has_proposal "$1"
}
merge() { # merge BRANCH: fast-forward main to it, wait for the apply
  local head; head=$(git rev-parse "$1")
  git checkout -q main && git merge -q --ff-only "$1" && git push -q origin main
  MERGED_AT=$(ms)
  wait_for "the merge of $1 is applied" 20 is_applied "$head"
}

rm -rf "$DEMO"
mkdir -p "$DEMO"

# A real Kubernetes control plane behind the fake's clusters (issue 12),
# when this machine has its cache (make kube): the demo's substrate then
# runs its node daemon and its Nodes join. Without the cache, the substrate
# stops at waiting for the node daemon, and the demo says so.
KUBE=
KUBE_YAML=
SUBSTRATE_YAML=
if "$ROOT/scripts/kube-cache.sh" --check >/dev/null 2>&1; then
  KUBE=1
  step "a Kubernetes control plane behind the fake provider's clusters (the cache of make kube is built)"
  check "the control plane helper builds (internal/testutil/kubeplane/demoplane)" \
    timeout 900 sh -c "cd '$ROOT' && ${GO:-go} build -o '$DEMO/demoplane' ./internal/testutil/kubeplane/demoplane"
  # Run from the repository: the plane finds its cache from there.
  (cd "$ROOT" && exec "$DEMO/demoplane" -fake-state "$DEMO/state/fake.json" -out "$DEMO/kube" -fleet-agent "$BIN") \
    >"$DEMO/kube.log" 2>&1 &
  PLANE_PID=$!
  # Up once it wrote its ready file; given up on at once if it exited.
  plane_ready() { [ -e "$DEMO/kube/ready" ] || { kill -0 "$PLANE_PID" 2>/dev/null && return 1; }; }
  if ! wait_for "the control plane is up (etcd, kube-apiserver, controllers, scheduler, kwok)" 150 plane_ready ||
    [ ! -e "$DEMO/kube/ready" ]; then
    tail -20 "$DEMO/kube.log" | show
    echo "demo: the control plane did not start; its log is $DEMO/kube.log"
    exit 1
  fi
  grep '^demoplane: ' "$DEMO/kube.log" | show
  JOIN_PORT=$(cat "$DEMO/kube/joinport")
  # The demo's image is in no registry (the control plane's Nodes are
  # simulated): the agent is told not to ask one for its digest.
  KUBE_YAML="
    kube:
      url: $(cat "$DEMO/kube/url")
      caFile: $DEMO/kube/ca.crt
      tokenFile: $DEMO/kube/admin.token"
  SUBSTRATE_YAML="
  nodeDaemon:
    image: fleet-agent:demo
    resolveDigest: false
    joinURL: http://127.0.0.1:$JOIN_PORT/
  join:
    listen: 127.0.0.1:$JOIN_PORT
    insecure: true"
else
  echo "note: the Kubernetes control plane cache is not built (build it with: make kube); the demo's"
  echo "      Kubernetes pool then stops at waiting for the node daemon, and no Node joins."
fi

# The fake provider's timing: how many observations an operation of each
# kind takes, and the substrate's pass (seconds); the waits of the upgrade
# and blue/green steps are derived from them.
FAKE_NODEPOOL=8 FAKE_UPDATE=2 FAKE_DELETE=2 FAKE_EVERY=1

step "a git repository with an empty fleet.json on main, and the agent's config"
git init -q --bare -b main "$DEMO/remote.git"
git clone -q "$DEMO/remote.git" "$DEMO/work" 2>/dev/null
cd "$DEMO/work"
git checkout -q -b main
echo '{ "version": 1 }' >fleet.json
git add fleet.json && git commit -qm "an empty fleet" && git push -q origin main
BOOT=$(git rev-parse HEAD)
cat >"$DEMO/config.yaml" <<EOF
# The demo's agent: a local repository, no GitHub, the fake provider.
git:
  url: $DEMO/remote.git
  interval: 1s
state: $DEMO/state/fleet.db
socket: $DEMO/api.sock
listen: 127.0.0.1:0
apply:
  prune: false
  requireReviewedPlan: true
drift:
  every: 2s
  pullRequests: true
substrate:
  every: ${FAKE_EVERY}s$SUBSTRATE_YAML
providers:
  fake:
    statePath: $DEMO/state/fake.json
    steps: { cluster: 4, nodePool: $FAKE_NODEPOOL, update: $FAKE_UPDATE, delete: $FAKE_DELETE }$KUBE_YAML
EOF
show <"$DEMO/config.yaml"
check "the config is valid (a plan loads it and opens its providers)" "$BIN" plan fleet.json

step "start the agent; an empty plan is followed without review"
start_agent
wait_for "the page answers on the ops listener" 20 page_has "" "<h1>Overview</h1>"
echo "    the page for people: $(page_url) (open it while the demo runs)"
wait_for "main's first commit is recorded as applied" 20 is_applied "$BOOT"

step "propose a change on a branch: planned, recorded, never applied"
git checkout -q -b add-gpu-pool
write_doc 4 4
check "the proposal validates" "$BIN" validate fleet.json
git commit -qam "add a GPU pool offered to acme" && git push -q origin add-gpu-pool
HEAD1=$(git rev-parse HEAD)
wait_for "the proposal is planned" 20 has_proposal add-gpu-pool
"$BIN" status | show
"$BIN" plan fleet.json | show
check "nothing was applied by proposing" is_applied "$BOOT"

step "merge it: the reviewed plan is applied"
git checkout -q main && git merge -q --ff-only add-gpu-pool && git push -q origin main
wait_for "the merge is applied" 20 is_applied "$HEAD1"
"$BIN" status | show
check "a plan of the merged document changes nothing" "$BIN" plan fleet.json --fail-on-drift
check "the page shows the applied commit" page_has "" "${HEAD1:0:12}"

step "a break-glass edit during an incident"
"$BIN" edit flavor gpu/small vcpu=8 | show
wait_for "the drift check reports it" 20 drifted
wait_for "the page shows the drift" 20 page_has "" "has drifted"
"$BIN" status | show
if "$BIN" status --fail-on-drift >/dev/null 2>&1; then bad "status --fail-on-drift exits non-zero while drifted"; else ok "status --fail-on-drift exits non-zero while drifted"; fi

step "keep the edit: the agent proposes it on a branch of its own; merged, it is applied without a call"
drift_branch() { git ls-remote -q origin 'refs/heads/fleet-agent/drift-*' | sed -n 's|.*refs/heads/||p' | head -1; }
has_drift_branch() { [ -n "$(drift_branch)" ]; }
wait_for "the drift proposal's branch is pushed" 20 has_drift_branch
KEEP_BRANCH=$(drift_branch)
wait_for "the drift proposal $KEEP_BRANCH is planned" 20 has_proposal "$KEEP_BRANCH"
"$BIN" status | awk '/^drift proposal/ { p = 1; print; next } p && /^  / { print; next } { p = 0 }' | show
git fetch -q origin "$KEEP_BRANCH"
git diff HEAD FETCH_HEAD | show
git merge -q --ff-only FETCH_HEAD && git push -q origin main
KEPT=$(git rev-parse HEAD)
wait_for "the kept edit is applied" 20 is_applied "$KEPT"
apply_row() { "$BIN" audit -o json | tr -d ' \n' | grep -o '{[^{}]*"action":"apply"[^{}]*"commit":"'"$1"'"[^{}]*}'; }
made_no_call() { apply_row "$1" | grep -qv '"calls"'; } # the audit leaves out a count of 0
check "its apply made no call" made_no_call "$KEPT"
check "main's fleet.json now says vcpu 8" grep -q '"vcpu": 8' fleet.json
wait_for "the drift cleared" 20 "$BIN" status --fail-on-drift
no_drift_branch() { ! has_drift_branch; }
wait_for "the agent deleted its branch" 20 no_drift_branch

step "a direct push to main, never proposed, is refused"
write_doc 4 6
git commit -qam "raise the quota without review" && git push -q origin main
DIRECT=$(git rev-parse HEAD)
wait_for "status lists the refusal" 20 refused "$DIRECT"
"$BIN" status | grep -A2 "^refused: commit ${DIRECT:0:7}" | show
check "the direct push is not applied" is_applied "$KEPT"
check "the refusal is in the log" grep -q "not applied: [0-9a-f]* was never proposed" "$DEMO/agent.log"
git reset -q --hard "$KEPT" && git push -q --force origin main
echo "    (main reset to the applied commit)"

step "kill -9 right after a merge is pushed; the restart applies it exactly once"
git checkout -q -b more-quota
write_doc 4 8
git commit -qam "owner keeps 8 GPUs" && git push -q origin more-quota
HEAD2=$(git rev-parse HEAD)
wait_for "the proposal is planned" 20 has_proposal more-quota
git checkout -q main && git merge -q --ff-only more-quota && git push -q origin main
kill -9 "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
AGENT_PID=
echo "    agent killed with SIGKILL"
start_agent
wait_for "the merge is applied after the restart" 20 is_applied "$HEAD2"
n=$(applies_of "$HEAD2")
if [ "$n" = 1 ]; then ok "the audit log has exactly one apply of $HEAD2"; else bad "the audit log has $n applies of $HEAD2"; fi
wait_for "the apply cleared the drift" 20 "$BIN" status --fail-on-drift
"$BIN" audit | tail -6 | show

H100='{ "name": "h100", "machineType": "fake-h100x8", "nodes": 1, "gpus": { "type": "nvidia-h100", "count": 8 } }'
# The cpu flavor asks for blue/green replacement from the start: a change of
# its machine type later makes a new node pool instead of an error.
CPU2='{ "name": "cpu", "machineType": "fake-cpu-4", "nodes": 2, "replace": "blueGreen" }'
CPU3='{ "name": "cpu", "machineType": "fake-cpu-4", "nodes": 3, "replace": "blueGreen" }'
CPU3_8='{ "name": "cpu", "machineType": "fake-cpu-8", "nodes": 3, "replace": "blueGreen" }'
L4='{ "name": "l4", "machineType": "fake-l4x1", "nodes": 1, "spot": true }'

# joined N: the substrate is ready with N Nodes listed, all N joined.
joined() { substrate_is '"state":"ready"' && substrate_is '"nodes":{"listed":'"$1"',"joined":'"$1"','; }
# ours_left: what of the agent's the control plane still holds (the claim,
# the Namespace fleet-node and its Pods, the substrate's Nodes), as the
# helper lists it on each pass.
nothing_ours_left() { [ -e "$DEMO/kube/ours" ] && [ ! -s "$DEMO/kube/ours" ]; }

step "a pool backed by Kubernetes: merged, its cluster and node pools come up on the fake provider"
write_doc 4 8 "$H100, $CPU2"
propose_and_merge add-k8s "a GPU pool on a managed Kubernetes cluster"
if [ -n "$KUBE" ]; then
  wait_for "the cluster and both node pools run" 60 \
    substrate_is '"flavor":"cpu","name":"fa-[a-z0-9]*-cpu","status":"running","nodes":2'
else
  wait_for "the cluster and both node pools run (the substrate then waits for the node daemon)" 60 \
    substrate_is '"flavor":"cpu","name":"fa-[a-z0-9]*-cpu","status":"running","nodes":2'
fi
check "both node pools run" substrate_is '"flavor":"h100","name":"fa-[a-z0-9]*-h100","status":"running","nodes":1'
if [ -n "$KUBE" ]; then
  # The in-cluster half: claim, Namespace, ConfigMap, DaemonSet fleet-node
  # (no join Secret: the control plane is 1.30 or later); kwok runs a Pod
  # per Node, the helper a node daemon per Pod with a token bound to that
  # Pod, and each joins with it through the agent's join listener.
  if wait_for "the substrate is ready, its 3 Nodes joined (3 of 3)" 120 joined 3; then
    echo "    merge to ready: $(( $(ms) - MERGED_AT )) ms (the fake's steps and the substrate's 1 s passes included)"
  fi
  check "a node daemon ran on each of the 3 Nodes" test "$(grep -c 'node daemon started on' "$DEMO/kube.log")" -ge 3
  holds_ours() { grep -q '^configmap kube-system/fleet-agent-substrate$' "$DEMO/kube/ours" &&
    grep -q '^namespace fleet-node$' "$DEMO/kube/ours" && [ "$(grep -c '^node ' "$DEMO/kube/ours")" = 3 ]; }
  wait_for "the cluster holds our claim, the Namespace fleet-node and the 3 Nodes" 10 holds_ours
else
  check "the substrate says it waits for the node daemon" substrate_is '"state":"creating","message":"[^"]*waitingforthenodedaemon'
fi
"$BIN" substrates | show
check "the fake provider holds exactly one cluster" test "$(fake_count '"name": "fa-k8s-')" = 1
check "the page shows the substrate and its node pools" page_has substrates "fa-[a-z0-9]*-h100"
# The node daemon and joining need a Kubernetes API behind the fake's
# clusters (providers.fake.kube, issue 12). Say plainly where this machine is.
if [ -n "$KUBE" ]; then
  echo "  note: a real control plane (make kube's cache) is behind the fake's clusters; its log is $DEMO/kube.log"
else
  echo "  note: the Kubernetes control plane cache is not built, so no node daemon runs and no Node joins:"
  echo "        the substrate stays creating, waiting for the node daemon. Build the cache with: make kube"
  echo "        (about 30 minutes on 2 cores, once per machine), then make demo shows the Nodes join."
fi

step "resize a flavor: merged, the node pool grows in place"
write_doc 4 8 "$H100, $CPU3"
propose_and_merge grow-k8s "three CPU nodes"
wait_for "the cpu node pool has 3 nodes" 60 substrate_is '"flavor":"cpu","name":"fa-[a-z0-9]*-cpu","status":"running","nodes":3'
[ -z "$KUBE" ] || wait_for "the new Node joins too (4 of 4)" 120 joined 4

# The substrate's conditions, as `substrates -o json` says them (without
# white space), and what the journal logged the provider accepting, in order.
condition_is() { substrate_is '"type":"'"$1"'","status":"'"$2"'","reason":"'"$3"'"'; } # TYPE STATUS REASON
condition_message() { "$BIN" substrates -o json | tr -d '\n' | sed -n 's/.*"type": *"'"$1"'", *"status": *"[A-Za-z]*", *"reason": *"[A-Za-z]*", *"message": *"\([^"]*\)".*/\1/p'; }
accepted_steps() { grep -o '"step":"[A-Za-z]*","object":"[^"]*","event":"accept"' "$DEMO/agent.log" | sed 's/"step":"\([A-Za-z]*\)","object":"\([^"]*\)".*/\1 \2/'; }
cluster_runs() { "$BIN" status -o json | tr -d ' \n' | grep -q '"location":"fake-east","endpoint":"[^"]*","version":"'"$1"'"'; }
# reasons_seen FILE: the reasons sampled into FILE, each run of one said once.
reasons_seen() { uniq "$1" | paste -sd' ' | sed 's/ / -> /g'; }
# The limits of the two steps below come from the fake's timing: an
# operation is done after its steps' observations, and each pass observes
# it at least once, so it takes at most steps + 2 passes (the call, its
# observations, the read that finds it done); three times that covers a
# loaded machine.
passes_limit() { echo $((3 * $1 * FAKE_EVERY + 10)); } # passes_limit PASSES: seconds

step "upgrade Kubernetes one minor: the plan shows each hop; merged, the control plane goes first, then each node pool"
write_doc 4 8 "$H100, $CPU3" 1.35
propose upgrade-k8s "Kubernetes 1.35"
"$BIN" plan --proposal upgrade-k8s | grep 'version 1.34 -> 1.35' | show
hops() { [ "$("$BIN" plan --proposal upgrade-k8s | grep -c '^~ substrate k8s version 1.34 -> 1.35 (')" = 3 ]; }
check "the proposal's plan has 3 hops: the control plane, then the node pools cpu and h100" hops
merge upgrade-k8s
# Sampled while it runs: the Upgrade condition's reason and the hop in flight.
upgraded() {
  local j; j=$("$BIN" substrates -o json | tr -d '\n')
  echo "$j" | tr -d ' ' | grep -o '"type":"Upgrade","status":"[A-Za-z]*","reason":"[A-Za-z]*"' | sed 's/.*"reason":"//; s/"$//' >>"$DEMO/upgrade.reasons"
  echo "$j" | sed -n 's/.*"type": *"Upgrade", *"status": *"Unknown", *"reason": *"UpgradeInProgress", *"message": *"upgrade \([^:"]*\).*/\1/p' >>"$DEMO/upgrade.hops"
  echo "$j" | tr -d ' ' | grep -q '"type":"Upgrade","status":"True","reason":"VersionCurrent"' && cluster_runs 1.35
}
: >"$DEMO/upgrade.reasons"
: >"$DEMO/upgrade.hops"
wait_for "the cluster and every node pool run 1.35 (Upgrade: VersionCurrent)" \
  "$(passes_limit $((3 * (FAKE_UPDATE + 2))))" upgraded
echo "    merge to upgraded: $(( $(ms) - MERGED_AT )) ms; the Upgrade condition went $(reasons_seen "$DEMO/upgrade.reasons")"
check "the Upgrade condition said a hop was in progress while it ran (UpgradeInProgress)" grep -q '^UpgradeInProgress$' "$DEMO/upgrade.reasons"
uniq "$DEMO/upgrade.hops" | sed 's/^/hop in flight: /' | show
upgrade_order() { # the control plane's hop accepted first, then each of the 2 node pools' once
  accepted_steps | grep '^upgrade' | show
  [ "$(accepted_steps | grep '^upgrade' | head -1)" = "upgradeControlPlane $(accepted_steps | sed -n 's/^upgradeControlPlane \(.*@1.35\)$/\1/p' | head -1)" ] &&
    [ "$(accepted_steps | grep -c '^upgradeControlPlane .*@1.35$')" = 1 ] &&
    [ "$(accepted_steps | grep '^upgradeNodePool .*@1.35$' | sort -u | wc -l)" = 2 ] &&
    [ "$(accepted_steps | grep -c '^upgradeNodePool .*@1.35$')" = 2 ]
}
if upgrade_order; then ok "the journal: the control plane's hop first, then each node pool's, each once"; else bad "the journal: the control plane's hop first, then each node pool's, each once"; fi
check "the fake provider: its control plane and its 2 node pools at 1.35, none left at 1.34" \
  test "$(fake_count '"version": "1.35"')-$(fake_count '"version": "1.34"')" = 3-0

step "replace a flavor blue/green: a new node pool of the new machine type beside the old one; the old one drained, then deleted"
write_doc 4 8 "$H100, $CPU3_8" 1.35
propose bluegreen-k8s "cpu nodes on fake-cpu-8, blue/green"
"$BIN" plan --proposal bluegreen-k8s | grep '^[-+~!] ' | show
merge bluegreen-k8s
cpu_pools() { "$BIN" substrates -o json | tr -d ' \n' | grep -o '"flavor":"cpu","name":"[^"]*","status":"[a-z]*","nodes":[0-9]*'; }
# Sampled while it runs: the NodePools condition's reason and the cpu node
# pools.
replaced() {
  "$BIN" substrates -o json | tr -d ' \n' | grep -o '"type":"NodePools","status":"[A-Za-z]*","reason":"[A-Za-z]*"' | sed 's/.*"reason":"//; s/"$//' >>"$DEMO/replace.reasons"
  local pools; pools=$(cpu_pools)
  echo "$pools" | sed -n 's/.*"name":"\([^"]*\)".*/\1/p' | paste -sd' ' >>"$DEMO/replace.pools"
  [ "$(echo "$pools" | wc -l)" = 1 ] && echo "$pools" | grep -q '"name":"fa-[a-z0-9]*-cpu-g2","status":"running","nodes":3$' &&
    substrate_is '"converged":true'
}
: >"$DEMO/replace.reasons"
: >"$DEMO/replace.pools"
# The new pool made, 3 Nodes drained one at a time (no budget: one at once),
# the old pool deleted.
wait_for "exactly one cpu node pool is left: the new generation's (-g2), running 3 nodes" \
  "$(passes_limit $((FAKE_NODEPOOL + 2 + 3 * 2 + FAKE_DELETE + 2)))" replaced
echo "    merge to replaced: $(( $(ms) - MERGED_AT )) ms; the NodePools condition went $(reasons_seen "$DEMO/replace.reasons")"
uniq "$DEMO/replace.pools" | sed 's/^/cpu node pools: /' | show
check "the NodePools condition said the pool was being replaced while it ran (Replacing)" grep -q '^Replacing$' "$DEMO/replace.reasons"
side_by_side() { grep -q -e '^fa-[a-z0-9]*-cpu fa-[a-z0-9]*-cpu-g2$' -e '^fa-[a-z0-9]*-cpu-g2 fa-[a-z0-9]*-cpu$' "$DEMO/replace.pools"; }
check "both pools were seen side by side before the old one went" side_by_side
check "the fake provider holds exactly one cpu node pool, of machine type fake-cpu-8" \
  test "$(fake_count '"name": "fa-[a-z0-9]*-cpu')-$(fake_count '"machineType": "fake-cpu-8"')" = 1-1
check "the new pool runs the cluster's 1.35 (the fake holds no 1.34)" test "$(fake_count '"version": "1.34"')" = 0
if [ -n "$KUBE" ]; then
  # The helper watches the Nodes and writes each one the first time it is
  # cordoned: a drain begins with the cordon.
  old_cordoned() { [ "$(grep -c '^node .*-cpu-[0-9][0-9]*$' "$DEMO/kube/cordoned")" = 3 ] &&
    ! grep -q -- '-g2-[0-9]*$' "$DEMO/kube/cordoned"; }
  check "the old pool's 3 Nodes were cordoned (drained) before they went, none of the new pool's" old_cordoned
  old_gone() { ! grep -q '^node .*-cpu-[0-9][0-9]*$' "$DEMO/kube/ours" &&
    [ "$(grep -c '^node .*-cpu-g2-[0-9]*$' "$DEMO/kube/ours")" = 3 ]; }
  wait_for "the cluster holds the new pool's 3 Nodes and none of the old pool's" 10 old_gone
  wait_for "the new pool's Nodes joined (4 of 4)" 120 joined 4
fi
"$BIN" substrates | show

step "kill -9 while a node pool is being made; the restart finishes it, never twice"
write_doc 4 8 "$H100, $CPU3_8, $L4" 1.35
propose_and_merge spot-k8s "a Spot L4 flavor"
l4_accepted() { grep -q '"step":"createNodePool","object":"fa-[a-z0-9]*-l4","event":"accept"' "$DEMO/agent.log"; }
wait_for "the provider accepted the l4 node pool's create (the journal says so)" 30 l4_accepted
kill -9 "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
AGENT_PID=
echo "    agent killed with SIGKILL in the middle of the create"
check "the fake provider was still making it when the agent died" grep -q '"status": "provisioning"' "$DEMO/state/fake.json"
start_agent
wait_for "the l4 node pool runs after the restart" 60 substrate_is '"flavor":"l4","name":"fa-[a-z0-9]*-l4","status":"running"'
check "the fake provider holds exactly one l4 node pool" test "$(fake_count '"name": "fa-[a-z0-9]*-l4"')" = 1
check "and still one cluster" test "$(fake_count '"name": "fa-k8s-')" = 1
[ -z "$KUBE" ] || wait_for "the l4 Node joins (5 of 5)" 120 joined 5
"$BIN" substrates | show

step "prune the pool: the substrate tears down its node pools, then its cluster"
sed -i 's/^  prune: false$/  prune: true/' "$DEMO/config.yaml"
check "apply.prune is set in the config" grep -q '^  prune: true$' "$DEMO/config.yaml"
kill -HUP "$AGENT_PID"
echo "    apply.prune set in the config and reloaded (SIGHUP)"
write_doc 4 8
propose_and_merge drop-k8s "the Kubernetes pool goes"
wait_for "the substrate is deleted" 90 substrate_is '"state":"deleted"'
check "the fake provider holds no cluster of ours" test "$(fake_count '"name": "fa-')" = 0
if [ -n "$KUBE" ]; then
  if ! wait_for "nothing of ours is left in the cluster (claim, Namespace fleet-node, its Pods, the Nodes)" 90 nothing_ours_left; then
    show <"$DEMO/kube/ours"
  fi
  check "every node daemon was stopped with its Pod" test "$(grep -c 'node daemon on .* stopped' "$DEMO/kube.log")" -ge 5
fi

step "the state is intact"
"$BIN" backup --out "$DEMO/fleet.db.bak" | show
check "the backup opens and plans like the live fleet" env FLEET_AGENT_STATE="$DEMO/fleet.db.bak" FLEET_AGENT_CONFIG= "$BIN" plan "$DEMO/work/fleet.json" --fail-on-drift --offline
check "export of the fleet plans empty with prune" sh -c "'$BIN' export >'$DEMO/export.json' && '$BIN' plan '$DEMO/export.json' --prune --fail-on-drift"

step "stop the agent (SIGTERM)"
kill -TERM "$AGENT_PID"
if wait "$AGENT_PID"; then ok "the agent exits 0 on SIGTERM"; else bad "the agent exits 0 on SIGTERM"; fi
AGENT_PID=

step "what to try next: the commands below are run here as printed, so they work when pasted"
cd "$ROOT"
NEXT=$(cat <<EOF
export PATH="$(dirname "$BIN"):\$PATH" FLEET_AGENT_CONFIG="$DEMO/config.yaml"
fleet-agent status
fleet-agent plan demo/work/fleet.json
fleet-agent audit
fleet-agent export
EOF
)
echo "$NEXT" | show
check "the printed commands work as pasted" bash -euo pipefail -c "$NEXT"
echo "    fleet-agent run   # the demo's agent again, in the foreground: Ctrl-C stops it"
echo "    (while it runs, its page is http://ADDRESS/ui/, ADDRESS being the \"listen\" of its start line; make demo KEEP=1 does this for you)"
echo "    The state file is $DEMO/state/fleet.db; the repository is $DEMO/remote.git (clone it, push a branch, watch)."

if [ -n "$KUBE" ] && [ -z "${KEEP:-}" ]; then
  if stop_plane; then ok "the control plane helper exits 0 on SIGTERM"; else bad "the control plane helper exits 0 on SIGTERM"; fi
fi

echo
echo "demo: $checks checks in $(($(date +%s) - START))s; the agent's log is $DEMO/agent.log"
if [ -n "${KEEP:-}" ]; then
  # make demo KEEP=1: the demo's agent again, so a person can look at the
  # page; Ctrl-C (or SIGTERM) stops it and ends the demo.
  start_agent >/dev/null
  echo
  echo "demo: KEEP is set: the agent runs (pid $AGENT_PID); its page is $(page_url)"
  echo "demo: press Ctrl-C to stop it"
  trap 'kill -TERM "$AGENT_PID" 2>/dev/null || true' INT TERM
  while kill -0 "$AGENT_PID" 2>/dev/null; do wait "$AGENT_PID" || true; done
  AGENT_PID=
fi
if [ "$failures" -gt 0 ]; then
  echo "demo: $failures check(s) FAILED"
  exit 1
fi
echo "demo: every check held"
