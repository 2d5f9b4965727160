#!/usr/bin/env bash
# notes: Deployment contended (1 replica). alice and bob read it at the same resourceVersion; alice replaces it (replicas 2, 200), bob replaces it from the same stale copy (replicas 3, 409 Conflict); bob then patches with the stale resourceVersion as a precondition (409 Conflict again), re-reads and succeeds (replicas 3); then the Deployment is deleted.
# shellcheck source=testbed/scenarios/lib.bash
source "$(dirname "$0")/lib.bash"
command -v jq >/dev/null || { say "jq not found on PATH (apt-get install -y jq)"; exit 1; }
: "${KUBETRAIL_ALICE_KUBECONFIG:?}" "${KUBETRAIL_BOB_KUBECONFIG:?}"
alice() { KUBECONFIG=$KUBETRAIL_ALICE_KUBECONFIG k "$@"; }
bob() { KUBECONFIG=$KUBETRAIL_BOB_KUBECONFIG k "$@"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

absent deployment contended
until_true 60 no_pods app=contended

say "create contended with 1 replica"
k create deployment contended --image=registry.k8s.io/nginx:1.27 --replicas=1 >/dev/null
k rollout status deployment/contended --timeout 60s >/dev/null
until_true 30 pods_running app=contended 1

say "alice and bob read it at the same resourceVersion"
alice get deployment contended -o json > "$tmp/alice.json"
cp "$tmp/alice.json" "$tmp/bob.json"
stale=$(jq -r .metadata.resourceVersion "$tmp/bob.json")

say "alice replaces it: replicas 2"
jq '.spec.replicas = 2' "$tmp/alice.json" > "$tmp/alice2.json"
alice replace -f "$tmp/alice2.json" >/dev/null

say "bob replaces it from the stale copy: 409"
jq '.spec.replicas = 3' "$tmp/bob.json" > "$tmp/bob2.json"
if bob replace -f "$tmp/bob2.json" >/dev/null 2>"$tmp/err"; then say "bob's stale replace unexpectedly succeeded"; exit 1; fi
grep -q 'the object has been modified' "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }

say "bob patches with the stale resourceVersion as precondition: 409"
if bob patch deployment contended --type merge -p "{\"metadata\":{\"resourceVersion\":\"$stale\"},\"spec\":{\"replicas\":3}}" >/dev/null 2>"$tmp/err"; then
  say "bob's stale patch unexpectedly succeeded"; exit 1; fi
grep -q 'the object has been modified' "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }

say "bob re-reads and patches: replicas 3"
bob patch deployment contended --type merge -p '{"spec":{"replicas":3}}' >/dev/null
k rollout status deployment/contended --timeout 60s >/dev/null
until_true 30 pods_running app=contended 3

say "delete contended"
k delete deployment contended --wait=true --timeout 60s >/dev/null
until_true 60 no_pods app=contended
