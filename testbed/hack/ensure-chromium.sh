#!/usr/bin/env bash
# Makes sure a headless Chromium is on PATH for the `kubetrail trace -o html` test, which renders
# the page and checks its DOM and a screenshot. Installs Debian's `chromium` package if missing.
set -euo pipefail
for c in chromium chromium-browser; do
  if command -v "$c" >/dev/null; then echo "chromium: $(command -v "$c")"; exit 0; fi
done
echo "chromium: not found, installing Debian's chromium"
export DEBIAN_FRONTEND=noninteractive
# Wait for a dpkg lock another install holds instead of failing at once, and finish a configuration
# another install left half done before one more try (a CI run saw "dpkg returned an error code
# (1)" while another apt-get installed chromium).
install() { apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium >/dev/null; }
apt-get -o DPkg::Lock::Timeout=600 update -qq
install || { dpkg --configure -a; install; }
command -v chromium >/dev/null || { echo "chromium: installation failed" >&2; exit 1; }
echo "chromium: $(command -v chromium)"
