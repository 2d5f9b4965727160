#!/usr/bin/env bash
# notes: Deployment demo: create with 2 replicas (annotated with a trace context), scale to 4, change the image (a second ReplicaSet), scale to 2, delete one pod (the ReplicaSet replaces it), delete the Deployment (the garbage collector removes ReplicaSets and Pods).
# shellcheck source=testbed/scenarios/lib.bash
source "$(dirname "$0")/lib.bash"
absent deployment demo
until_true 60 no_pods app=demo

# KEP-5915's annotation (tracing.k8s.io/traceparent), written with plain kubectl: a CI system puts
# its own traceparent here, a new one per deploy, and so does each run (DEMO_TRACEPARENT, which e2e
# sets); e2e checks that the Deployment's first window is placed in that trace and its window spans
# link to it. The recordings in the processor's testdata were made with the older key,
# trace.kubernetes.io/context, which the collector still reads.
tp=${DEMO_TRACEPARENT:-00-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')-$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')-01}
say "create demo with 2 replicas, carrying the trace context $tp (tracing.k8s.io/traceparent)"
k create deployment demo --image=registry.k8s.io/nginx:1.27 --replicas=2 --dry-run=client -o yaml \
  | k annotate --local -f - "tracing.k8s.io/traceparent=$tp" -o yaml \
  | k create -f - >/dev/null
k rollout status deployment/demo --timeout 60s >/dev/null
until_true 30 pods_running app=demo 2

say "scale to 4"
k scale deployment demo --replicas=4 >/dev/null
k rollout status deployment/demo --timeout 60s >/dev/null
until_true 30 pods_running app=demo 4

say "change the image"
k set image deployment/demo nginx=registry.k8s.io/nginx:1.28 >/dev/null
k rollout status deployment/demo --timeout 60s >/dev/null
until_true 30 pods_running app=demo 4

say "scale to 2"
k scale deployment demo --replicas=2 >/dev/null
k rollout status deployment/demo --timeout 60s >/dev/null
until_true 30 pods_running app=demo 2

say "delete one pod"
victim=$(k get pods -l app=demo -o 'jsonpath={.items[0].metadata.name}')
k delete pod "$victim" --wait=true --timeout 30s >/dev/null
until_true 30 pods_running app=demo 2

if [[ ${SCENARIO_KEEP:-} == 1 ]]; then
  # The e2e check of `kubectl trail` reads the live Deployment's UID from the cluster; it deletes it.
  say "keep the deployment (SCENARIO_KEEP=1)"
  exit 0
fi

say "delete the deployment"
k delete deployment demo --wait=true --timeout 60s >/dev/null
until_true 60 no_pods app=demo
