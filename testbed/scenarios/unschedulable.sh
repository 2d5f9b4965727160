#!/usr/bin/env bash
# notes: Pod pending has a nodeSelector (disk=ssd) no node matches: the scheduler reports FailedScheduling, retries (cluster-up sets --pod-max-in-unschedulable-pods-duration=5s; the retry comes within 5-35 s) and fails again, which turns the Event into a series (series.count 2); labelling the node disk=ssd fixes it and the pod is bound and Running; then the pod is deleted and the label removed.
# shellcheck source=testbed/scenarios/lib.bash
source "$(dirname "$0")/lib.bash"
node=kwok-node-0
absent pod pending
# Start from a node without the labels this scenario sets (only reads when already clean).
if [[ -n $(k get node "$node" -o 'jsonpath={.metadata.labels.disk}') ]]; then k label node "$node" disk- >/dev/null; fi

unschedulable() { [[ $(k get pod pending -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}') == Unschedulable ]]; }
running() { [[ $(k get pod pending -o 'jsonpath={.status.phase}') == Running ]]; }

say "create pod pending with nodeSelector disk=ssd"
k apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: pending
  labels: {app: pending}
spec:
  nodeSelector: {disk: ssd}
  containers:
  - name: app
    image: registry.k8s.io/pause:3.10
YAML
until_true 30 unschedulable

# Node or pod changes do not help: the scheduler's queueing hints see that they cannot make the
# pod schedulable and skip the retry, and any change to the pod would make the next failure a new
# Event (the Event's key includes the pod's resourceVersion) rather than a series. So wait.
series() {
  k get events.events.k8s.io --field-selector regarding.name=pending,reason=FailedScheduling \
    -o 'jsonpath={.items[*].series.count}' | grep -q '[2-9]'
}
say "wait for the scheduler to retry: a FailedScheduling series"
until_true 60 series

say "label the node disk=ssd: the pod schedules"
k label node "$node" disk=ssd >/dev/null
until_true 30 running

say "clean up"
k delete pod pending --wait=true --timeout 30s >/dev/null
k label node "$node" disk- >/dev/null
