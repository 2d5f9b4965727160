#!/usr/bin/env bash
# notes: Pod phoenix and Service phoenix are created, deleted and created again under the same names: each must be two objects with two UIDs. The second pod gets a different image so the two incarnations differ.
# shellcheck source=testbed/scenarios/lib.bash
source "$(dirname "$0")/lib.bash"
absent pod phoenix
absent service phoenix

pod() {
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: phoenix
  labels: {app: phoenix}
spec:
  containers:
  - name: app
    image: $1
YAML
}
running() { [[ $(k get pod phoenix -o 'jsonpath={.status.phase}') == Running ]]; }

say "create pod and service phoenix"
pod registry.k8s.io/nginx:1.27
k create service clusterip phoenix --tcp=80:80 >/dev/null
until_true 30 running
first=$(k get pod phoenix -o 'jsonpath={.metadata.uid}')

say "delete both"
k delete pod phoenix --wait=true --timeout 30s >/dev/null
k delete service phoenix --wait=true --timeout 30s >/dev/null

say "create them again under the same names"
pod registry.k8s.io/nginx:1.28
k create service clusterip phoenix --tcp=80:80 >/dev/null
until_true 30 running
second=$(k get pod phoenix -o 'jsonpath={.metadata.uid}')
[[ $first != "$second" ]] || { say "recreated pod kept its UID $first"; exit 1; }
say "pod UIDs: $first then $second"

say "delete both"
k delete pod phoenix --wait=true --timeout 30s >/dev/null
k delete service phoenix --wait=true --timeout 30s >/dev/null
