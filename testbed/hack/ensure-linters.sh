#!/usr/bin/env bash
# Makes sure the linters `make lint` runs are present: shellcheck (Debian's package, installed if
# missing) and golangci-lint, built once from the Go module proxy into $KUBETRAIL_CACHE/bin and reused.
# Prints the golangci-lint binary's path on the last line of stdout.
set -euo pipefail
GOLANGCI_LINT_VERSION=${GOLANGCI_LINT_VERSION:-v2.15.0}
cache=${KUBETRAIL_CACHE:-$HOME/.cache/kubetrail}
bin=$cache/bin/golangci-lint-$GOLANGCI_LINT_VERSION

if ! command -v shellcheck >/dev/null; then
  echo "lint: shellcheck not found, installing Debian's shellcheck" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq shellcheck >/dev/null
fi

if [ ! -x "$bin/golangci-lint" ]; then
  echo "lint: building golangci-lint $GOLANGCI_LINT_VERSION into $bin (once; several minutes on 2 cores)" >&2
  mkdir -p "$bin"
  start=$(date +%s)
  # Built outside this module so its dependencies never enter go.mod.
  (cd "$bin" && GOBIN=$bin GOFLAGS=-trimpath GOTOOLCHAIN=local \
    nice -n 10 go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION")
  echo "lint: golangci-lint built in $(( $(date +%s) - start )) s" >&2
fi
echo "$bin/golangci-lint"
