#!/usr/bin/env bash
# Builds the envtest control-plane binaries (kube-apiserver, etcd) and
# kube-controller-manager from the Go module proxy and prints the directory
# that holds them (for KUBEBUILDER_ASSETS). kube-controller-manager is not part
# of envtest; localstack/controlplane runs it beside the API server so that
# namespace deletion, garbage collection, ServiceAccounts and ResourceQuota
# work as on a real cluster.
#
# Why build: the usual download site of setup-envtest is not reachable from our
# machines, but the Go module proxy is. k8s.io/kubernetes and etcd's server
# module carry `replace` directives pointing into their own source trees, so
# `go install pkg@version` refuses them; a throwaway module that requires them
# and replaces each staging module with its published version builds them.
#
# Honours KUBEBUILDER_ASSETS when it already holds all three binaries. Caches by
# version under bin/k8s/<k8s-version>-etcd-<etcd-version>/.
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.7.0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${ENVTEST_DIR:-$ROOT/bin/k8s/${KUBE_VERSION}-etcd-${ETCD_VERSION}}

if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" && -x "$KUBEBUILDER_ASSETS/kube-controller-manager" ]]; then
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

mkdir -p "$OUT"
log() { echo "envtest: $*" >&2; }
# Several test binaries (and make targets) may ask at once: one builds, the
# others wait for it instead of building into the same directories.
exec 9>"$OUT/.lock"
flock 9

# build_in_module <dir> <module@version> <package> <output> <ldflags> <replace lines...>
build_in_module() {
  local dir=$1 modver=$2 pkg=$3 out=$4 ldflags=$5; shift 5
  rm -rf "$dir" && mkdir -p "$dir"
  {
    echo "module envtestbuild"
    echo
    echo "go 1.26"
    echo
    echo "require ${modver/@/ }"
    echo
    echo "replace ("
    printf '\t%s\n' "$@"
    echo ")"
  } >"$dir/go.mod"
  printf 'package tools\n\nimport _ "%s"\n' "$pkg" >"$dir/tools.go"
  with_progress "$(basename "$out")" \
    bash -c 'cd "$1" && GOFLAGS=-mod=mod go mod tidy >&2 && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags="-s -w $4" -o "$2.tmp" "$3" >&2' _ "$dir" "$out" "$pkg" "$ldflags"
  mv "$out.tmp" "$out"
}

# with_progress <what> <command...> runs the command, saying every 30 s that
# it is still at work: go prints nothing while it compiles for minutes.
with_progress() {
  local what=$1 start=$SECONDS rc=0; shift
  (while sleep 30; do log "still building $what ($((SECONDS - start)) s so far)"; done) &
  local ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  log "built $what in $((SECONDS - start)) s"
  return "$rc"
}

# The replace targets come from the module's own go.mod, so a new Kubernetes
# release with a new staging module needs no edit here.
modfile() { (cd "$ROOT" && go mod download -json "$1" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p'); }

if [[ ! -x "$OUT/etcd" ]]; then
  log "building etcd v$ETCD_VERSION (about 30 s)"
  mapfile -t reps < <(sed -n 's#^\s*\(go\.etcd\.io/etcd/[^ ]*\) => \.\./.*#\1#p' "$(modfile go.etcd.io/etcd/server/v3@v$ETCD_VERSION)" |
    awk -v v="v$ETCD_VERSION" '{print $1 " => " $1 " " v}')
  build_in_module "$ROOT/bin/envtest-build/etcd" "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" go.etcd.io/etcd/server/v3 "$OUT/etcd" "" "${reps[@]}"
fi

# The version the API server reports (/version, what `helm install` checks a
# chart's kubeVersion against) is stamped at link time, as Kubernetes' own
# release build does; a build without it reports v0.0.0-master.
minor=${KUBE_VERSION#1.}
minor=${minor%%.*}
kube_ldflags="-X k8s.io/component-base/version.gitVersion=v$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
for component in kube-apiserver kube-controller-manager; do
  # An earlier build without the version stamp is rebuilt (a relink: the
  # build cache keeps the compiled packages).
  [[ -x "$OUT/$component" ]] && "$OUT/$component" --version 2>/dev/null | grep -qx "Kubernetes v$KUBE_VERSION" && continue
  log "building $component v$KUBE_VERSION (about 5 min on 2 cores; the second one reuses most of the first)"
  mapfile -t reps < <(sed -n 's#^\s*\(k8s\.io/[^ ]*\) => \./staging/.*#\1#p' "$(modfile k8s.io/kubernetes@v$KUBE_VERSION)" |
    awk -v v="v0.${KUBE_VERSION#1.}" '{print $1 " => " $1 " " v}')
  build_in_module "$ROOT/bin/envtest-build/$component" "k8s.io/kubernetes@v$KUBE_VERSION" "k8s.io/kubernetes/cmd/$component" "$OUT/$component" "$kube_ldflags" "${reps[@]}"
done

echo "$OUT"
