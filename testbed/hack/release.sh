#!/usr/bin/env bash
# Builds a kubetrail release into build/release/<version>/ (`make release`, docs/releasing.md):
#
#   kubectl-trail_v<V>_<os>_<arch>.tar.gz      the CLI (kubectl-trail, LICENSE) for each platform
#   otelcol-kubetrail_v<V>_linux_<arch>.tar.gz the collector (otelcol-kubetrail, LICENSE)
#   otelcol-kubetrail_v<V>_image.tar           the multi-arch image: an OCI image layout whose tag
#                                              is an image index over the linux architectures;
#                                              each image holds the collector and the CLI (/kubetrail)
#   kubetrail-<V>.tgz                          the Helm chart
#   trail.yaml                                 the krew plugin manifest over the CLI archives
#   sbom.spdx.json                             SPDX 2.3 SBOM of every binary (Go modules, hashes)
#   SHA256SUMS                                 sha256sum of every file above
#
# The version is builder-config.yaml's dist.version, the one version of the collector, the CLI,
# the image and the chart; Chart.yaml's version and appVersion must say the same. Builds are
# reproducible: CGO_ENABLED=0, -trimpath, every time is the commit's.
#
#   SNAPSHOT=1   build from a tree with uncommitted changes (refused otherwise)
#   PLATFORMS    the platforms to build, default "linux/amd64 linux/arm64 darwin/amd64
#                darwin/arm64"; the collector and image are built for the linux ones only
#   RELEASE_URL  where the release's files are downloaded from, for the krew manifest (default
#                the GitHub release of tag v<V>)
#
# Expects what `make release` builds first: bin/otelcol-kubetrail and the sources ocb generated in
# build/otelcol-kubetrail (make build), and helm at $KUBETRAIL_HELM (make helm). The collector of
# the host's own linux architecture is bin/otelcol-kubetrail itself; the others are compiled from
# ocb's sources with ocb's own flags. Arm64 and darwin builds take minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { echo "release: $*" >&2; exit 1; }

version=$(sed -n 's/^  version: *//p' builder-config.yaml)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "builder-config.yaml dist.version \"$version\" is not a semantic version"
chart=distribution/helm/kubetrail/Chart.yaml
chart_version=$(sed -n 's/^version: *//p' "$chart")
chart_app=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart")
[[ $chart_version == "$version" && $chart_app == "$version" ]] ||
  die "$chart says version $chart_version, appVersion $chart_app; builder-config.yaml dist.version is $version: make them one"

SNAPSHOT=${SNAPSHOT:-0}
if [[ -n $(git status --porcelain) ]]; then
  if [[ $SNAPSHOT != 1 ]]; then
    git status --short >&2
    die "the tree has uncommitted changes (above): a release is built from a commit. Commit or stash them, or build a snapshot with SNAPSHOT=1"
  fi
  echo "release: SNAPSHOT=1: building from a tree with uncommitted changes" >&2
fi
[[ -f LICENSE ]] || {
  [[ $SNAPSHOT == 1 ]] || die "there is no LICENSE at the repository root: the archives ship it"
  echo "release: SNAPSHOT=1: no LICENSE at the repository root, the archives go without it" >&2
}

PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
commit=$(git rev-parse HEAD)
epoch=$(git log -1 --format=%ct)
date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
url=${RELEASE_URL:-https://github.com/kubetrail/kubetrail/releases/download/v$version}
helm=${KUBETRAIL_HELM:?KUBETRAIL_HELM is not set: run make release}
host_arch=$(go env GOARCH)
[[ -x bin/otelcol-kubetrail && -f build/otelcol-kubetrail/go.mod ]] || die "bin/otelcol-kubetrail or ocb's sources are missing: run make release (it builds them first)"
[[ -x $helm ]] || die "no helm at $helm: run make helm"

out=build/release/$version
stage=build/release/.stage-$version
tools=build/release/.tools
rm -rf "$out" "$stage"
mkdir -p "$out" "$stage" "$tools"
export CGO_ENABLED=0 GOFLAGS=-trimpath SOURCE_DATE_EPOCH=$epoch
go build -o "$tools/release" ./testbed/cmd/release
(cd distribution/image && go build -o "../../$tools/image" .)

licence=()
[[ -f LICENSE ]] && licence=(LICENSE)
binaries=()
image_args=()
for platform in $PLATFORMS; do
  os=${platform%/*} arch=${platform#*/}
  [[ $platform =~ ^(linux|darwin)/(amd64|arm64)$ ]] || die "platform $platform: want linux or darwin on amd64 or arm64"
  dir=$stage/${os}_$arch
  mkdir -p "$dir"
  echo "release: kubectl-trail $version $os/$arch" >&2
  GOOS=$os GOARCH=$arch go build -ldflags "-s -w -X main.version=$version -X main.commit=$commit -X main.date=$date" \
    -o "$dir/kubectl-trail" ./cmd/kubetrail
  "$tools/release" archive -mtime "$epoch" -out "$out/kubectl-trail_v${version}_${os}_$arch.tar.gz" "$dir/kubectl-trail" "${licence[@]}" >/dev/null
  binaries+=("$dir/kubectl-trail")
  [[ $os == linux ]] || continue

  if [[ $arch == "$host_arch" && $(go env GOOS) == linux ]]; then
    cp bin/otelcol-kubetrail "$dir/otelcol-kubetrail"
  else
    echo "release: otelcol-kubetrail $version linux/$arch (from ocb's sources in build/otelcol-kubetrail)" >&2
    # ocb's own compilation (cmd/builder internal/builder/main.go): -trimpath, -ldflags="-s -w".
    (cd build/otelcol-kubetrail && GOOS=linux GOARCH=$arch go build -trimpath -ldflags="-s -w" -gcflags= \
      -o "../../$dir/otelcol-kubetrail" .)
  fi
  "$tools/release" archive -mtime "$epoch" -out "$out/otelcol-kubetrail_v${version}_linux_$arch.tar.gz" "$dir/otelcol-kubetrail" "${licence[@]}" >/dev/null
  binaries+=("$dir/otelcol-kubetrail")
  image_args+=(-binary "$dir/otelcol-kubetrail" -cli "$dir/kubectl-trail" -arch "$arch")   # the CLI is /kubetrail in the image (the chart's viewer)
done
((${#binaries[@]} > 0)) || die "PLATFORMS is empty"

host_collector=$stage/linux_$host_arch/otelcol-kubetrail
if [[ -x $host_collector && $(go env GOOS) == linux ]]; then
  got=$("$host_collector" --version)
  [[ $got == *" $version" ]] || die "otelcol-kubetrail --version says \"$got\", not $version"
fi

if ((${#image_args[@]} > 0)); then
  echo "release: image" >&2
  "$tools/image" -index "${image_args[@]}" -config distribution/config.yaml -version "$version" \
    -revision "$commit" -created "$epoch" -out "$out/otelcol-kubetrail_v${version}_image.tar" >&2
fi

echo "release: chart" >&2
"$helm" package distribution/helm/kubetrail --destination "$out" >&2

kubectl_archives=("$out"/kubectl-trail_v"${version}"_*.tar.gz)
"$tools/release" krew -version "$version" -url "$url" -out "$out/trail.yaml" "${kubectl_archives[@]}" >/dev/null
"$tools/release" sbom -version "$version" -commit "$commit" -created "$date" \
  -namespace "$url/sbom.spdx.json#$commit" -out "$out/sbom.spdx.json" "${binaries[@]}" >/dev/null

sums=$(cd "$out" && find . -maxdepth 1 -type f -printf '%f\n' | LC_ALL=C sort | xargs sha256sum --)
printf '%s\n' "$sums" >"$out/SHA256SUMS"
rm -rf "$stage"
echo "release: $version ($commit) in $out:" >&2
ls -l "$out" >&2
