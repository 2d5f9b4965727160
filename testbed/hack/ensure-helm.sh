#!/usr/bin/env bash
# Builds helm from the Go module proxy into the binary cache (once) and prints its path. The chart
# tests (`make chart-test`, the e2e chart test) run this helm; nothing else is downloaded.
#
#   testbed/hack/ensure-helm.sh          → $KUBETRAIL_CACHE/bin/helm-$HELM_VERSION/helm
#
# Cold on 2 shared cores: about 6 min (modules downloaded); with the module cache warm, 1-2 min.
set -euo pipefail
HELM_VERSION=${HELM_VERSION:-v3.19.0}
CACHE=${KUBETRAIL_CACHE:-$HOME/.cache/kubetrail}
out=$CACHE/bin/helm-$HELM_VERSION
if [[ -x $out/helm ]]; then echo "$out/helm"; exit 0; fi
command -v go >/dev/null || { echo "ensure-helm: go is not on PATH" >&2; exit 1; }
mkdir -p "$out"
# The Kubernetes version helm assumes for `helm template` and `helm lint` (without a cluster) comes
# from its client-go, set by ldflags as helm's own Makefile does; without it helm assumes v1.20.
modfile=$(cd "$out" && GOFLAGS=-mod=mod go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
client_go=$(awk '$1=="k8s.io/client-go" {print $2; exit}' "$modfile")
minor=$(echo "$client_go" | cut -d. -f2)
[[ $minor =~ ^[0-9]+$ ]] || { echo "ensure-helm: cannot read client-go's version from $modfile" >&2; exit 1; }
ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ld+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
done
echo "ensure-helm: building helm $HELM_VERSION (client-go $client_go) into $out" >&2
t0=$SECONDS
tmp=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-trimpath GOBIN=$tmp go install -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv -f "$tmp/helm" "$out/helm"
echo "ensure-helm: built in $((SECONDS - t0)) s" >&2
echo "$out/helm"
