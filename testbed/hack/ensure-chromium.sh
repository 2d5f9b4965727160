#!/usr/bin/env bash
# Makes sure a headless Chromium is on PATH for the `kubetrail trace -o html` test, which renders
# the page and checks its DOM and a screenshot. Installs Debian's `chromium` package if missing.
set -euo pipefail
for c in chromium chromium-browser; do
  if command -v "$c" >/dev/null; then echo "chromium: $(command -v "$c")"; exit 0; fi
done
echo "chromium: not found, installing Debian's chromium"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null || { echo "chromium: installation failed" >&2; exit 1; }
echo "chromium: $(command -v chromium)"
