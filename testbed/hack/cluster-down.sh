#!/usr/bin/env bash
# Stops the control plane started by cluster-up.sh, by the PIDs it recorded (never by name),
# etcd last: SIGTERM, up to 5 s grace, then SIGKILL. Keeps $STATE (logs, audit.log)
# for inspection; cluster-up.sh replaces it on the next start.
#
#   testbed/hack/cluster-down.sh        (KUBETRAIL_STATE as in cluster-up.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${KUBETRAIL_STATE:-$ROOT/testbed/.state}
log() { printf '[cluster-down] %s\n' "$*" >&2; }

order=$STATE/pids/order
if [[ ! -f $order ]]; then log "nothing to stop (no $order)"; exit 0; fi

# ours PID NAME: the PID is still the process we started (PIDs get reused).
ours() {
  local pid=$1 name=$2 cmd
  [[ -r /proc/$pid/cmdline ]] || return 1
  cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline")
  [[ $cmd == *"$name"* ]]
}

pids=()
names=()
while read -r name; do
  f=$STATE/pids/$name.pid
  [[ -f $f ]] || continue
  pid=$(cat "$f")
  if ours "$pid" "$name"; then pids=("$pid" "${pids[@]}"); names=("$name" "${names[@]}"); fi
done < "$order"

# stop_all PID...: SIGTERM to all at once, 5 s grace, SIGKILL for the rest. Nothing here needs a
# clean shutdown (the state is thrown away), only a prompt one: the apiserver alone can take 10 s
# draining its audit webhook buffer when nothing listens.
stop_all() {
  local t0 pid left
  t0=$(date +%s%3N)
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do
    left=0; for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left=1; done
    (( left )) || break; sleep 0.1
  done
  for pid in "$@"; do
    if kill -0 "$pid" 2>/dev/null; then log "pid $pid ignored SIGTERM for 5 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  done
  log "stopped pid(s) $* in $(( $(date +%s%3N) - t0 )) ms"
}
# Everything but etcd first (they all talk to etcd through the apiserver), then etcd.
front=() etcd=()
for i in "${!pids[@]}"; do
  if [[ ${names[$i]} == etcd ]]; then etcd+=("${pids[$i]}"); else front+=("${pids[$i]}"); fi
done
(( ${#front[@]} )) && stop_all "${front[@]}"
(( ${#etcd[@]} )) && stop_all "${etcd[@]}"
rm -f "$STATE"/pids/*.pid "$order"
