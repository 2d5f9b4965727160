#!/usr/bin/env bash
# Records the fixtures of one scenario from a real control plane into testbed/fixtures/SCENARIO/:
# builds the recorder (testbed/cmd/record), starts it, brings up a fresh control plane whose audit
# webhook points at it, waits for the start-up writes to settle, records while the scenario runs,
# waits until every audit event of the log has also arrived through the webhook, tears down.
#
#   testbed/hack/record.sh SCENARIO      (make record SCENARIO=deployment)
#   testbed/hack/record.sh all           (every testbed/scenarios/*.sh, one fresh cluster each)
#
# A scenario script may name its audit policy in a header line `# audit-policy: PATH` (relative to
# the repository root) and describe itself in `# notes: TEXT` (copied into scenario.json).
#
#   RECORD_POLICY=PATH  records under that audit policy instead (relative to the repository root)
#   RECORD_TO=DIR       writes the recording to DIR instead of testbed/fixtures/SCENARIO (used for
#                       the benchmark captures under testbed/bench, which no golden test reads)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
log() { printf '[record] %s\n' "$*" >&2; }
die() { printf '[record] error: %s\n' "$*" >&2; exit 1; }

scenario=${1:-}
scenarios=(testbed/scenarios/*.sh); scenarios=("${scenarios[@]##*/}")
[[ -n $scenario ]] || die "usage: $0 SCENARIO|all   (scenarios: ${scenarios[*]%.sh})"
if [[ $scenario == all ]]; then
  for s in testbed/scenarios/*.sh; do "$0" "$(basename "$s" .sh)"; done
  exit 0
fi
script=testbed/scenarios/$scenario.sh
[[ -f $script ]] || die "no scenario script $script"

header() { sed -n "s/^# $1: //p" "$script" | head -n1; }
policy=$(header audit-policy); policy=${RECORD_POLICY:-${policy:-testbed/policy/audit-policy.yaml}}
dest=${RECORD_TO:-testbed/fixtures/$scenario}
notes=$(header notes)
[[ -f $policy ]] || die "audit policy $policy (named by $script) not found"

WORK=$ROOT/testbed/.out/record
OUT=$WORK/$scenario
export KUBETRAIL_STATE=$WORK/state
mkdir -p "$WORK/bin"
rm -rf "$OUT"

log "building the recorder"
go build -o "$WORK/bin/record" ./testbed/cmd/record

rec_pid=""
cleanup() {
  local rc=$?
  "$ROOT/testbed/hack/cluster-down.sh" >/dev/null 2>&1 || true
  if [[ -n $rec_pid ]] && kill -0 "$rec_pid" 2>/dev/null; then kill -TERM "$rec_pid"; wait "$rec_pid" 2>/dev/null || true; fi
  (( rc == 0 )) || log "failed (exit $rc); logs in $KUBETRAIL_STATE/logs and $WORK/record.log"
}
trap cleanup EXIT

rm -f "$WORK/addr"
"$WORK/bin/record" -listen 127.0.0.1:0 -addr-file "$WORK/addr" -out "$OUT" \
  -kubeconfig "$KUBETRAIL_STATE/kubeconfig" -audit-log "$KUBETRAIL_STATE/audit.log" \
  -scenario "$scenario" -kubernetes-version "${K8S_VERSION:-v1.36.3}" -audit-policy "$policy" \
  -notes "$notes" >"$WORK/record.log" 2>&1 &
rec_pid=$!
for _ in $(seq 100); do [[ -s $WORK/addr ]] && break; kill -0 "$rec_pid" || die "recorder exited (see $WORK/record.log)"; sleep 0.1; done
addr=$(cat "$WORK/addr")

AUDIT_WEBHOOK_URL=http://$addr/audit/testbed AUDIT_POLICY=$ROOT/$policy "$ROOT/testbed/hack/cluster-up.sh"
# shellcheck disable=SC1091
source "$KUBETRAIL_STATE/env"

# Start-up writes (RBAC bootstrap, service accounts, node registration) are not the scenario's:
# wait until the audit log has been still for 2 s (at most 30 s).
last=-1 still=0
for _ in $(seq 300); do
  size=$(stat -c %s "$KUBETRAIL_AUDIT_LOG")
  if [[ $size == "$last" ]]; then still=$((still + 1)); else still=0; last=$size; fi
  (( still >= 20 )) && break
  sleep 0.1
done

curl -sf -X POST "http://$addr/control/start" >/dev/null || die "recorder refused to start (see $WORK/record.log)"
log "running scenario $scenario"
t0=$(date +%s%3N)
bash "$ROOT/$script"
t1=$(date +%s%3N)
log "scenario $scenario ran in $((t1 - t0)) ms; waiting for the last audit batch"
summary=$(curl -sf -X POST "http://$addr/control/stop") || die "recorder failed to stop (see $WORK/record.log)"

rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
cp -r "$OUT" "$dest"
log "recorded in $dest ($(du -sh "$dest" | cut -f1)): $summary"
