# Sourced by every scenario script: strict mode, kubectl against $KUBECONFIG, and helpers that
# keep scenarios idempotent without writing anything the audit log would record as scenario noise
# (deleting something that is not there is an audited 404, so existence is checked with a read).
set -euo pipefail
: "${KUBECONFIG:?KUBECONFIG must point at the testbed (source testbed/.state/env)}"
KUBECTL=${KUBECTL:-kubectl}
k() { "$KUBECTL" --request-timeout 20s "$@"; }
say() { printf '[scenario %s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }

# absent KIND NAME...: delete the named objects if they exist and wait until they and their
# dependents' deletion is visible.
absent() {
  local kind=$1; shift
  local n
  for n in "$@"; do
    if k get "$kind" "$n" >/dev/null 2>&1; then k delete "$kind" "$n" --wait=true --timeout 60s >/dev/null; fi
  done
}

# until_true TIMEOUT_S CMD...: polls CMD every 200 ms.
until_true() {
  local timeout=$1; shift
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || { say "timed out after ${timeout}s: $*"; return 1; }
    sleep 0.2
  done
}

# no_pods SELECTOR: true once no pod matches (the garbage collector and kwok finished).
no_pods() { [[ -z $(k get pods -l "$1" -o name 2>/dev/null) ]]; }
# pods_running SELECTOR N: exactly N pods match and all are Running.
pods_running() {
  local phases; phases=$(k get pods -l "$1" -o 'jsonpath={range .items[*]}{.status.phase}{"\n"}{end}')
  [[ $(grep -c . <<<"$phases") == "$2" && $(grep -c '^Running$' <<<"$phases") == "$2" ]]
}
