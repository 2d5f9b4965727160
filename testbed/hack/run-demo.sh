#!/usr/bin/env bash
# `make run`: start bin/otelcol-kubetrail on distribution/config.yaml, replay a real audit capture
# recorded from the testbed control plane (testbed/fixtures/$DEMO_SCENARIO) into its webhook, and
# print the traces it exported as trees. The collector then keeps running for a real apiserver,
# until Ctrl-C. RUN_ONCE=1 stops it after the summary (the distribution test uses that).
set -euo pipefail
cd "$(dirname "$0")/../.."
scenario=${DEMO_SCENARIO:-deployment}
out=build/run
mkdir -p "$out"
rm -f "$out/traces.jsonl"
export KUBETRAIL_OUT=$out/traces.jsonl
export KUBETRAIL_CLUSTER=${KUBETRAIL_CLUSTER:-demo}

bin/otelcol-kubetrail --config distribution/config.yaml >"$out/collector.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM

for _ in $(seq 100); do
  curl -fsS -o /dev/null http://127.0.0.1:13133/ 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "the collector exited; its log:" >&2; cat "$out/collector.log" >&2; exit 1; }
  sleep 0.1
done
echo "otelcol-kubetrail is up (pid $pid): audit webhook http://127.0.0.1:9880/audit/<cluster>, log $out/collector.log"

bodies=(testbed/fixtures/"$scenario"/audit-webhook/*.json)
[[ -e ${bodies[0]} ]] || { echo "no recorded capture in testbed/fixtures/$scenario" >&2; exit 1; }
events=0
for body in "${bodies[@]}"; do
  code=$(curl -sS -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$body" "http://127.0.0.1:9880/audit/$KUBETRAIL_CLUSTER")
  [[ $code == 200 ]] || { echo "POST $body answered $code" >&2; exit 1; }
  events=$((events + $(grep -o '"auditID"' "$body" | wc -l)))
done
echo "replayed ${#bodies[@]} webhook batches ($events audit events) recorded by the '$scenario' scenario"

# Spans held for owner_wait leave a little later: wait until the export file stops growing.
last=-1
for _ in $(seq 50); do
  sleep 0.5
  size=$(stat -c %s "$out/traces.jsonl" 2>/dev/null || echo 0)
  [[ $size -gt 0 && $size -eq $last ]] && break
  last=$size
done
echo
go run ./testbed/cmd/tracetree -traces 1 -max-children 8 "$out/traces.jsonl"
echo
echo "all spans: $out/traces.jsonl (OTLP JSON, one batch per line)"
[[ ${RUN_ONCE:-0} == 1 ]] && exit 0
echo "the collector keeps running; point a kube-apiserver at it (distribution/audit-webhook-kubeconfig.yaml). Ctrl-C stops it."
wait "$pid"
