#!/usr/bin/env bash
# make kube: builds a whole Kubernetes control plane for tests (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kwok) from the Go
# module proxy, once per machine, into a cache outside the clone:
#
#   ${FLEET_AGENT_KUBE_CACHE:-$HOME/.cache/fleet-agent/kube}/v1.37.2-<recipe hash>/
#     bin/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kwok}
#     kwok-stage/          kwok's Stage configs, copied from its module
#     stamp                the recipe hash, and the size and SHA-256 of every file above
#
# internal/testutil/kubeplane finds the same directory by the same rule (it
# hashes the recipe block below the same way): keep the two in step.
#
# Usage: scripts/kube-cache.sh             build unless the cache is complete
#        scripts/kube-cache.sh --print-dir print the cache directory, build nothing
#        scripts/kube-cache.sh --check     exit 0 if the cache is complete, 1 if not
#        scripts/kube-cache.sh --verify    --check, and every file's SHA-256 too
#                                          (about 2 CPU-seconds; 10 s on a busy machine)
#
# A cold build takes about 30 minutes and 3 GB of memory on 2 cores; a warm
# run only checks the stamp. Builds go to a temporary directory renamed into
# place once complete, so a killed build never leaves a cache that looks
# complete; the throwaway Go modules live under the cache root, never in the
# clone, and Go's own build cache (GOCACHE) is reused, so a rerun after a
# kill starts where the compiler left off.
set -euo pipefail

# recipe: begin. The cache key hashes these lines (from "begin" to "end",
# exactly). Change a version or the way the build works (then bump
# RECIPE_REVISION) and every machine rebuilds.
K8S_VERSION=v1.37.2
STAGING_VERSION=v0.37.2
KWOK_VERSION=v0.8.0
STAGING_DROPPED="k8s.io/sample-cli-plugin k8s.io/sample-controller"
LDFLAGS_BASE="-s -w" # with -trimpath, CGO_ENABLED=0, GOFLAGS=-buildvcs=false
RECIPE_REVISION=1
# recipe: end

SCRIPT="${BASH_SOURCE[0]}"
CACHE_ROOT="${FLEET_AGENT_KUBE_CACHE:-$HOME/.cache/fleet-agent/kube}"
RECIPE_HASH=$(sed -n '/^# recipe: begin/,/^# recipe: end/p' "$SCRIPT" | sha256sum | cut -c1-12)
KEY="$K8S_VERSION-$RECIPE_HASH"
DIR="$CACHE_ROOT/$KEY"
BINARIES="etcd kube-apiserver kube-controller-manager kube-scheduler kwok"

die() { echo "kube-cache: $*" >&2; exit 1; }

# complete DIR: the stamp names this recipe and every file it lists is there
# with its size. Sizes, not checksums: checksumming 400 MB costs seconds a
# warm run should not (--verify does it); a truncated or missing file, the
# damage a lost disk or a stray rm does, shows in the size.
complete() {
  local d=$1 b size path
  [ -f "$d/stamp" ] || return 1
  [ "$(sed -n 's/^recipe //p' "$d/stamp")" = "$RECIPE_HASH" ] || return 1
  for b in $BINARIES; do [ -x "$d/bin/$b" ] || return 1; done
  grep -q '^size ' "$d/stamp" || return 1
  while read -r _ size path; do
    [ "$(stat -c %s "$d/$path" 2>/dev/null)" = "$size" ] || return 1
  done < <(grep '^size ' "$d/stamp")
}
verified() {
  complete "$1" && (cd "$1" && grep -E '^[0-9a-f]{64}  ' stamp | sha256sum --check --status --strict -)
}

case "${1:-}" in
  --print-dir) echo "$DIR"; exit 0 ;;
  --check) if complete "$DIR"; then exit 0; else exit 1; fi ;;
  --verify) if verified "$DIR"; then exit 0; else exit 1; fi ;;
  "") ;;
  *) die "unknown argument $1 (use --print-dir, --check or --verify, or nothing to build)" ;;
esac

command -v go >/dev/null 2>&1 || die "go is not on PATH (Go 1.26 at /usr/local/go/bin)"
command -v flock >/dev/null 2>&1 || die "flock is missing (Debian package util-linux)"
command -v setsid >/dev/null 2>&1 || die "setsid is missing (Debian package util-linux)"

if complete "$DIR"; then
  echo "kube-cache: $DIR is complete (recipe $RECIPE_HASH): nothing to build"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
# One build at a time per cache root: two engineers (or CI and a person) on
# one machine would otherwise both spend 30 minutes and race on the rename.
exec 9>"$CACHE_ROOT/.lock"
if ! flock --nonblock 9; then
  echo "kube-cache: another build holds $CACHE_ROOT/.lock; waiting for it"
  flock 9
fi
if complete "$DIR"; then
  echo "kube-cache: $DIR was completed by the other build: nothing to build"
  exit 0
fi

# The environment of the build is the script's, not the caller's: a GOFLAGS
# with -mod=vendor, a go.work above the cache, a cgo toolchain or a newer
# toolchain request would each change or break what gets built.
export GOWORK=off GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0 GO111MODULE=on
unset GOOS GOARCH GOEXPERIMENT GOAMD64

WORK="$CACHE_ROOT/.work/$KEY"
# What a build killed with SIGKILL (or a lost machine) left: never looked at
# as a cache, removed here while the lock is held.
rm -rf "$CACHE_ROOT"/.partial-* "$CACHE_ROOT"/.stale-*
STAGE_DIR=$(mktemp -d "$CACHE_ROOT/.partial-$KEY.XXXXXX")
# A build that fails or is stopped leaves no partial directory behind; the
# throwaway modules (small) stay for the next try, and Go's build cache
# keeps what was compiled.
trap 'rm -rf "$STAGE_DIR"' EXIT
# Each step runs in a session of its own, waited for in the background, so
# that a stop (Ctrl-C, a CI timeout's SIGTERM) reaches the script at once
# and the script ends the whole step (go build and its compilers), not only
# after a 20-minute compile.
CHILD=
stopped() {
  echo "kube-cache: stopped; nothing was installed" >&2
  if [ -n "$CHILD" ]; then
    kill -TERM -- "-$CHILD" 2>/dev/null || true
    wait "$CHILD" 2>/dev/null || true
  fi
  exit 130
}
trap stopped INT TERM HUP

report=()
# typical NAME: the seconds a step usually takes cold on 2 cores (measured
# here; a busy machine takes longer), for the progress lines.
typical() {
  case "$1" in
    "kubernetes module graph"*) echo 40 ;;
    kube-apiserver*) echo 1000 ;;
    kube-controller-manager*) echo 450 ;;
    kube-scheduler*) echo 150 ;;
    etcd*) echo 60 ;;
    "kwok module graph"*) echo 20 ;;
    kwok*) echo 120 ;;
    *) echo 60 ;;
  esac
}
STEPS=7
STEP_NO=0
mmss() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
# progress NAME BEGAN: every 30 seconds while a step runs, one line with
# its elapsed time against its typical time and the whole build's elapsed
# time, so that a 30-minute build never looks hung.
progress() {
  local name=$1 began=$2 typ
  typ=$(typical "$name")
  while sleep 30; do
    local el=$((SECONDS - began)) left
    left=$((typ - el))
    if [ "$left" -gt 0 ]; then left="about $(mmss "$left") left"; else left="past its typical $(mmss "$typ"), still going"; fi
    echo "kube-cache: step $STEP_NO/$STEPS $name: $(mmss "$el") elapsed, $left; build $(mmss $(($(date +%s) - START))) so far"
  done
}
# step NAME COMMAND...: runs one build step, printing how long it took and
# the peak resident memory of its largest process (GNU time, when there).
step() {
  local name=$1; shift
  STEP_NO=$((STEP_NO + 1))
  echo "kube-cache: step $STEP_NO/$STEPS: building $name (typically $(mmss "$(typical "$name")") cold on 2 cores) ..."
  rm -f "$WORK/.time"
  local began=$SECONDS rc=0
  if [ -x /usr/bin/time ]; then
    setsid /usr/bin/time -f '%e %M' -o "$WORK/.time" "$@" &
  else
    setsid "$@" &
  fi
  CHILD=$!
  progress "$name" "$began" &
  local ticker=$!
  wait "$CHILD" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  CHILD=
  [ "$rc" -eq 0 ] || die "building $name failed (exit $rc, see above); rerun 'make kube' after fixing it"
  local secs=$((SECONDS - began)) kb=0
  if [ -s "$WORK/.time" ]; then read -r secs kb <"$WORK/.time"; fi
  report+=("$(printf '%-34s %8ss %6s MiB peak' "$name" "$secs" "$((kb / 1024))")")
  echo "kube-cache: built $name in ${secs}s (peak $((kb / 1024)) MiB)"
}

moddir() { # moddir MODULE@VERSION: the module's directory in the module cache
  go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}
gomod() { # gomod MODULE@VERSION: the module's go.mod file in the module cache
  go mod download -json "$1" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p'
}

START=$(date +%s)
echo "kube-cache: cold build of $KEY into $DIR (about 30 minutes on 2 cores)"
go version

# --- The Kubernetes module. k8s.io/kubernetes replaces its staging modules
# with directories of its own repository, which its published module does not
# contain: a throwaway module requires it and replaces each staging module
# with the same module published at STAGING_VERSION instead.
KMOD="$WORK/kubernetes"
mkdir -p "$KMOD"
KGOMOD=$(gomod "k8s.io/kubernetes@$K8S_VERSION")
[ -s "$KGOMOD" ] || die "could not download k8s.io/kubernetes@$K8S_VERSION from the Go module proxy"
GO_LINE=$(grep -m1 '^go ' "$KGOMOD")
STAGING=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/\1$#\1#p' "$KGOMOD")
[ -n "$STAGING" ] || die "found no staging replace block in $KGOMOD: the recipe needs updating"
{
  echo "// Generated by scripts/kube-cache.sh: a throwaway module that builds"
  echo "// Kubernetes $K8S_VERSION from the Go module proxy. Not part of fleet-agent."
  echo "module fleet-agent.dev/kube-cache/kubernetes"
  echo
  echo "$GO_LINE"
  echo
  grep '^godebug ' "$KGOMOD" && echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "tool ("
  echo "	go.etcd.io/etcd/server/v3"
  echo "	k8s.io/kubernetes/cmd/kube-apiserver"
  echo "	k8s.io/kubernetes/cmd/kube-controller-manager"
  echo "	k8s.io/kubernetes/cmd/kube-scheduler"
  echo ")"
  echo
  echo "replace ("
  for m in $STAGING; do
    case " $STAGING_DROPPED " in *" $m "*) continue ;; esac
    echo "	$m => $m $STAGING_VERSION"
  done
  echo ")"
} >"$KMOD/go.mod"
rm -f "$KMOD/go.sum"
step "kubernetes module graph" sh -c "cd '$KMOD' && go mod tidy"
# etcd is etcd's own main (go.etcd.io/etcd/server/v3, which takes etcd's
# standard flags) at the version Kubernetes itself requires.
ETCD_VERSION=$(cd "$KMOD" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
KVER="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
KVER="$KVER -X k8s.io/component-base/version.gitMajor=$(echo "$K8S_VERSION" | sed 's/^v\([0-9]*\)\..*/\1/')"
KVER="$KVER -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/')"
KVER="$KVER -X k8s.io/component-base/version.gitTreeState=clean"
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  step "$b $K8S_VERSION" sh -c "cd '$KMOD' && go build -trimpath -ldflags '$LDFLAGS_BASE $KVER' -o '$STAGE_DIR/bin/$b' k8s.io/kubernetes/cmd/$b"
done
step "etcd $ETCD_VERSION" sh -c "cd '$KMOD' && go build -trimpath -ldflags '$LDFLAGS_BASE' -o '$STAGE_DIR/bin/etcd' go.etcd.io/etcd/server/v3"

# --- kwok, in a throwaway module of its own: it is built against other
# Kubernetes library versions than the control plane.
WMOD="$WORK/kwok"
mkdir -p "$WMOD"
cat >"$WMOD/go.mod" <<EOF
// Generated by scripts/kube-cache.sh: a throwaway module that builds kwok
// $KWOK_VERSION from the Go module proxy. Not part of fleet-agent.
module fleet-agent.dev/kube-cache/kwok

$(grep -m1 '^go ' "$(gomod "sigs.k8s.io/kwok@$KWOK_VERSION")")

require sigs.k8s.io/kwok $KWOK_VERSION

tool sigs.k8s.io/kwok/cmd/kwok
EOF
rm -f "$WMOD/go.sum"
step "kwok module graph" sh -c "cd '$WMOD' && go mod tidy"
step "kwok $KWOK_VERSION" sh -c "cd '$WMOD' && go build -trimpath -ldflags '$LDFLAGS_BASE -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION' -o '$STAGE_DIR/bin/kwok' sigs.k8s.io/kwok/cmd/kwok"
# kwok exits "no stages found" without Stage objects; its module ships them.
KWOK_DIR=$(moddir "sigs.k8s.io/kwok@$KWOK_VERSION")
[ -d "$KWOK_DIR/kustomize/stage" ] || die "sigs.k8s.io/kwok@$KWOK_VERSION has no kustomize/stage: the recipe needs updating"
cp -R "$KWOK_DIR/kustomize/stage" "$STAGE_DIR/kwok-stage"
chmod -R u+w "$STAGE_DIR/kwok-stage"

# Each binary must at least run.
for b in $BINARIES; do
  case $b in
    etcd) "$STAGE_DIR/bin/etcd" --version >/dev/null ;;
    kwok) "$STAGE_DIR/bin/kwok" --version >/dev/null ;;
    *) "$STAGE_DIR/bin/$b" --version >/dev/null ;;
  esac || die "$b was built but does not run"
done

{
  echo "recipe $RECIPE_HASH"
  (cd "$STAGE_DIR" && find bin kwok-stage -type f | LC_ALL=C sort | xargs stat -c 'size %s %n')
  (cd "$STAGE_DIR" && find bin kwok-stage -type f | LC_ALL=C sort | xargs sha256sum)
} >"$STAGE_DIR/stamp"
chmod 0755 "$STAGE_DIR"

# Into place: a stale directory of the same key (a cache someone changed, or
# one from before a stamp existed) is moved aside first, then the complete
# one is renamed in, which is atomic on one filesystem.
if [ -e "$DIR" ]; then
  mv "$DIR" "$CACHE_ROOT/.stale-$KEY.$$"
  rm -rf "$CACHE_ROOT/.stale-$KEY.$$"
fi
mv "$STAGE_DIR" "$DIR"
trap - EXIT
verified "$DIR" || die "$DIR does not check after the build: this is a bug in the script"

echo
echo "kube-cache: built $KEY in $(($(date +%s) - START))s:"
printf '  %s\n' "${report[@]}"
du -sh "$DIR/bin"/* | sed 's/^/  /'
echo "kube-cache: $DIR"
