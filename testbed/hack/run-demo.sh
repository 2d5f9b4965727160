#!/usr/bin/env bash
# `make run`: start bin/otelcol-kubetrail on distribution/config.yaml, replay a real audit capture
# recorded from the testbed control plane (testbed/fixtures/$DEMO_SCENARIO) into its webhook, and
# read the scenario's object back with `bin/kubetrail trace` from the exported file, as the README
# shows. The collector then keeps running for a real apiserver, until Ctrl-C. RUN_ONCE=1 stops it
# after the trace (TestMakeRunEndsWithTheTraceTheREADMEShows uses that, on ports of its own:
# KUBETRAIL_AUDIT_ENDPOINT, KUBETRAIL_HEALTH_ENDPOINT, KUBETRAIL_METRICS_PORT).
set -euo pipefail
cd "$(dirname "$0")/../.."
scenario=${DEMO_SCENARIO:-deployment}
out=build/run
mkdir -p "$out"
rm -f "$out/traces.jsonl"
export KUBETRAIL_OUT=$out/traces.jsonl
export KUBETRAIL_CLUSTER=${KUBETRAIL_CLUSTER:-demo}
audit_endpoint=${KUBETRAIL_AUDIT_ENDPOINT:-127.0.0.1:9880}
health_endpoint=${KUBETRAIL_HEALTH_ENDPOINT:-127.0.0.1:13133}
# The object each recorded scenario is about (the CLI's golden tests read the same ones).
case $scenario in
  deployment) object=deployment/demo ;;
  conflict) object=deployment/contended ;;
  job) object=cronjob/nightly ;;
  unschedulable) object=pod/pending ;;
  recreate) object=pod/phoenix ;;
  secret) object=secret/db-credentials ;;
  *) object=${DEMO_OBJECT:?DEMO_OBJECT=TYPE/NAME names the object of scenario $scenario} ;;
esac
object=${DEMO_OBJECT:-$object}

bin/otelcol-kubetrail --config distribution/config.yaml >"$out/collector.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM

for _ in $(seq 100); do
  curl -fsS -o /dev/null "http://$health_endpoint/" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { echo "the collector exited; its log:" >&2; cat "$out/collector.log" >&2; exit 1; }
  sleep 0.1
done
echo "otelcol-kubetrail is up (pid $pid): audit webhook http://$audit_endpoint/audit/<cluster>, log $out/collector.log"

bodies=(testbed/fixtures/"$scenario"/audit-webhook/*.json)
[[ -e ${bodies[0]} ]] || { echo "no recorded capture in testbed/fixtures/$scenario" >&2; exit 1; }
events=0
for body in "${bodies[@]}"; do
  code=$(curl -sS -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$body" "http://$audit_endpoint/audit/$KUBETRAIL_CLUSTER")
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
echo "\$ bin/kubetrail trace $object -n default --cluster $KUBETRAIL_CLUSTER --source file=$out/traces.jsonl"
bin/kubetrail trace "$object" -n default --cluster "$KUBETRAIL_CLUSTER" --source "file=$out/traces.jsonl"
echo
echo "all spans: $out/traces.jsonl (OTLP JSON, one batch per line); -o timeline, -o json or -o html --out page.html show them otherwise (docs/cli.md)"
[[ ${RUN_ONCE:-0} == 1 ]] && exit 0
echo "the collector keeps running; point a kube-apiserver at it (distribution/audit-webhook-kubeconfig.yaml). Ctrl-C stops it."
wait "$pid"
