#!/usr/bin/env bash
# End-to-end: the real control plane, Jaeger v2 and bin/otelcol-kubetrail, every scenario, checks
# on the traces as Jaeger returns them (testbed/e2e, build tag e2e). `make e2e` builds the
# collector and the binaries first. Prints a one-screen summary; exits non-zero on any failed
# check; leaves no process behind (everything is stopped by PID, also on Ctrl-C).
#
#   testbed/hack/e2e.sh [go test flags, e.g. -test.run TestConflict -test.v]
#   KUBETRAIL_E2E_SCENARIOS=deployment,conflict testbed/hack/e2e.sh    (a subset)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
OUT=$ROOT/testbed/.out/e2e
log() { printf '[e2e] %s\n' "$*" >&2; }
die() { printf '[e2e] error: %s\n' "$*" >&2; exit 1; }
t0=$(date +%s)

collector=${KUBETRAIL_COLLECTOR:-$ROOT/bin/otelcol-kubetrail}
[[ -x $collector ]] || die "missing $collector: build it with 'make build' (or run 'make e2e')"
testbed/hack/build-binaries.sh all 2>&1 | sed 's/^/  /' >&2

# Leftovers of an earlier run that died hard (kill -9 of the test binary): stop them by PID.
cleanup_leftovers() {
  local f pid
  for f in "$OUT"/pids/*.pid; do
    [[ -e $f ]] || continue
    pid=$(cat "$f")
    # Only if the PID still runs what we started (PIDs get reused).
    if kill -0 "$pid" 2>/dev/null && [[ $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) =~ jaeger|otelcol|/kafka|/childmaker ]]; then
      log "stopping leftover $(basename "$f" .pid) ($pid)"; kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  KUBETRAIL_STATE=$OUT/state testbed/hack/cluster-down.sh >/dev/null 2>&1 || true
}
cleanup_leftovers
rm -rf "$OUT"; mkdir -p "$OUT/pids"

log "compiling the e2e tests, the Kafka broker (testbed/cmd/kafka) and the example controller (testbed/cmd/childmaker)"
t1=$(date +%s)
go test -c -tags e2e -o "$OUT/e2e.test" ./testbed/e2e
go build -o "$OUT/kafka" ./testbed/cmd/kafka
go build -o "$OUT/childmaker" ./testbed/cmd/childmaker
t2=$(date +%s)

test_pid=""
# shellcheck disable=SC2317  # called by the EXIT trap, which shellcheck 0.9 does not follow
on_exit() {
  local rc=$?
  if [[ -n $test_pid ]] && kill -0 "$test_pid" 2>/dev/null; then
    # The test binary tears down on SIGTERM (collector, Jaeger, control plane): give it time.
    kill -TERM "$test_pid" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$test_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$test_pid" 2>/dev/null || true
  fi
  cleanup_leftovers
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

log "running (logs and configs in testbed/.out/e2e)"
set +e
(cd testbed/e2e && exec "$OUT/e2e.test" -test.count=1 -test.timeout 35m "$@") &
test_pid=$!
wait "$test_pid"
rc=$?
set -e
test_pid=""
t3=$(date +%s)
log "compile $((t2 - t1)) s, run $((t3 - t2)) s, total $((t3 - t0)) s; exit $rc"
exit "$rc"
