#!/usr/bin/env bash
# Builds the real control-plane binaries (kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kubeadm, etcd, kwok) and Jaeger v2 from the Go module proxy into a cache outside the repository,
# and reuses them when present. Nothing is downloaded except modules from the proxy.
#
#   testbed/hack/build-binaries.sh [k8s|etcd|kwok|jaeger|all]   (default: all)
#
# The cache is $KUBETRAIL_CACHE (default ~/.cache/kubetrail); binaries land in $KUBETRAIL_CACHE/bin.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
JAEGER_VERSION=${JAEGER_VERSION:-v1.76.0}
CACHE=${KUBETRAIL_CACHE:-$HOME/.cache/kubetrail}
BIN=$CACHE/bin
WORK=$CACHE/build
mkdir -p "$BIN" "$WORK"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-trimpath
command -v go >/dev/null || { echo "build-binaries: go is not on PATH" >&2; exit 1; }

log() { printf '[build-binaries] %s\n' "$*" >&2; }

# replaces_for MODFILE PUBLISHED_VERSION: for every module the .mod file replaces with a local path
# and also requires, print a replace directive pointing at the published version of that module.
replaces_for() {
  local modfile=$1 ver=$2
  awk -v ver="$ver" '
    /^require[ \t]*\(/ {inreq=1; next}
    /^replace[ \t]*\(/ {inrep=1; next}
    /^\)/ {inreq=0; inrep=0; next}
    inreq && NF>=2 {req[$1]=1}
    /^require[ \t]+[^(]/ {req[$2]=1}
    inrep && $2=="=>" && ($3 ~ /^\.\.?\//) {loc[$1]=1}
    /^replace[ \t]+[^(]/ && $3=="=>" && ($4 ~ /^\.\.?\//) {loc[$2]=1}
    END {for (m in loc) if (m in req) printf "replace %s => %s %s\n", m, m, ver}
  ' "$modfile" | sort
}

# modfile_of MOD@VER: path of the module's go.mod in the module cache (downloads it).
modfile_of() { (cd "$WORK" && GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p'); }

build_k8s() {
  local out=$BIN/k8s-$K8S_VERSION
  # kubeadm only generates manifests in the tests (testbed/e2e/kubeadm_test.go); built after the
  # apiserver it shares most packages with, it costs little more.
  local cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubeadm) c missing=0
  for c in "${cmds[@]}"; do [[ -x $out/$c ]] || missing=1; done
  if (( ! missing )); then
    log "kubernetes $K8S_VERSION: cached in $out"; return; fi
  local dir=$WORK/k8s-$K8S_VERSION staging=v0.${K8S_VERSION#v1.}
  mkdir -p "$dir" "$out"
  local modfile; modfile=$(modfile_of "k8s.io/kubernetes@$K8S_VERSION")
  { echo "module kubetrail.local/k8sbuild"; echo; echo "go 1.26.0"; echo
    echo "require k8s.io/kubernetes $K8S_VERSION"; echo
    replaces_for "$modfile" "$staging"; } > "$dir/go.mod"
  printf 'package tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler"\n\t_ "k8s.io/kubectl/pkg/cmd"\n\t_ "k8s.io/kubernetes/cmd/kubeadm"\n)\n' > "$dir/tools.go"
  sed -i 's#_ "k8s.io/kubectl/pkg/cmd"#_ "k8s.io/kubernetes/cmd/kubectl"#' "$dir/tools.go"
  log "kubernetes $K8S_VERSION: resolving modules"
  (cd "$dir" && go mod tidy >/dev/null)
  local minor ld
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  for c in "${cmds[@]}"; do
    [[ -x $out/$c ]] && continue
    log "kubernetes $K8S_VERSION: building $c"
    local t0=$SECONDS
    (cd "$dir" && go build -ldflags "$ld" -o "$out/$c.tmp" "k8s.io/kubernetes/cmd/$c") && mv "$out/$c.tmp" "$out/$c"
    log "kubernetes $K8S_VERSION: $c built in $((SECONDS-t0)) s"
  done
}

build_etcd() {
  local out=$BIN/etcd-$ETCD_VERSION
  if [[ -x $out/etcd ]]; then log "etcd $ETCD_VERSION: cached"; return; fi
  local dir=$WORK/etcd-$ETCD_VERSION
  mkdir -p "$dir" "$out"
  local modfile; modfile=$(modfile_of "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
  { echo "module kubetrail.local/etcdbuild"; echo; echo "go 1.26.0"; echo
    echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"; echo
    replaces_for "$modfile" "$ETCD_VERSION"; } > "$dir/go.mod"
  printf 'package tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > "$dir/tools.go"
  # The module root is a main package; importing it from a library file does not type-check,
  # so resolve with go get + go list instead of tidy.
  rm -f "$dir/tools.go"
  log "etcd $ETCD_VERSION: resolving modules"
  (cd "$dir" && GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1) || true
  (cd "$dir" && GOFLAGS=-mod=mod go list -deps go.etcd.io/etcd/server/v3 >/dev/null)
  local t0=$SECONDS
  (cd "$dir" && GOFLAGS="-mod=mod -trimpath" go build -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3) && mv "$out/etcd.tmp" "$out/etcd"
  log "etcd $ETCD_VERSION: built in $((SECONDS-t0)) s"
}

build_kwok() {
  local out=$BIN/kwok-$KWOK_VERSION
  if [[ -x $out/kwok ]]; then log "kwok $KWOK_VERSION: cached"; return; fi
  mkdir -p "$out"
  local t0=$SECONDS
  GOBIN=$out go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # kwok's stages ship in its module source; keep a copy next to the binary.
  local src; src=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
  mkdir -p "$out/stage" && cp -r "$src"/. "$out/stage/" && chmod -R u+w "$out/stage"
  log "kwok $KWOK_VERSION: built in $((SECONDS-t0)) s"
}

build_jaeger() {
  local out=$BIN/jaeger-$JAEGER_VERSION
  if [[ -x $out/jaeger ]]; then log "jaeger $JAEGER_VERSION: cached"; return; fi
  local dir=$WORK/jaeger-$JAEGER_VERSION
  mkdir -p "$dir" "$out"
  local modfile; modfile=$(modfile_of "github.com/jaegertracing/jaeger@$JAEGER_VERSION")
  local zip=${modfile%.mod}.zip
  (cd "$WORK" && GOFLAGS=-mod=mod go mod download "github.com/jaegertracing/jaeger@$JAEGER_VERSION")
  # Start from jaeger's own go.sum: the checksum database reachable here is partial.
  unzip -p "$zip" "github.com/jaegertracing/jaeger@$JAEGER_VERSION/go.sum" > "$dir/go.sum"
  { echo "module kubetrail.local/jaegerbuild"; echo; echo "go 1.26.0"; echo
    echo "require github.com/jaegertracing/jaeger $JAEGER_VERSION"; echo
    grep -E '^replace .*=> [^.]' "$modfile" || true; } > "$dir/go.mod"
  log "jaeger $JAEGER_VERSION: resolving modules"
  (cd "$dir" && GOFLAGS=-mod=mod go list -deps github.com/jaegertracing/jaeger/cmd/jaeger >/dev/null)
  local t0=$SECONDS
  (cd "$dir" && GOFLAGS="-mod=mod -trimpath" go build -ldflags "-s -w" -o "$out/jaeger.tmp" github.com/jaegertracing/jaeger/cmd/jaeger) && mv "$out/jaeger.tmp" "$out/jaeger"
  log "jaeger $JAEGER_VERSION: built in $((SECONDS-t0)) s"
}

what=${1:-all}
case $what in
  k8s) build_k8s ;; etcd) build_etcd ;; kwok) build_kwok ;; jaeger) build_jaeger ;;
  all) build_etcd; build_kwok; build_k8s; build_jaeger ;;
  *) echo "usage: $0 [k8s|etcd|kwok|jaeger|all]" >&2; exit 2 ;;
esac
