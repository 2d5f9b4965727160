#!/usr/bin/env bash
# notes: Secrets with values that must never reach a trace backend: db-credentials from a literal (kubectl create), api-token with stringData through kubectl apply (the value also lands in the last-applied-configuration annotation), a pod consuming both, a patch rotating api-token, then everything deleted. Recorded with testbed/policy/audit-policy-secrets.yaml, which logs Secrets at RequestResponse like a careless cluster.
# audit-policy: testbed/policy/audit-policy-secrets.yaml
# secret-values: kt-literal-hunter2-5f1c0ffee kt-applied-s3cr3t-7b0bcafe kt-rotated-t0ken-9d15ea5e
# shellcheck source=testbed/scenarios/lib.bash
source "$(dirname "$0")/lib.bash"
LITERAL=kt-literal-hunter2-5f1c0ffee
APPLIED=kt-applied-s3cr3t-7b0bcafe
ROTATED=kt-rotated-t0ken-9d15ea5e
absent pod secret-consumer
absent secret db-credentials api-token

say "create db-credentials from a literal"
k create secret generic db-credentials --from-literal=password="$LITERAL" >/dev/null

say "apply api-token with stringData"
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: api-token
type: Opaque
stringData:
  token: $APPLIED
YAML

say "a pod consuming both"
k apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: secret-consumer
  labels: {app: secret-consumer}
spec:
  containers:
  - name: app
    image: registry.k8s.io/pause:3.10
    env:
    - name: DB_PASSWORD
      valueFrom: {secretKeyRef: {name: db-credentials, key: password}}
    - name: API_TOKEN
      valueFrom: {secretKeyRef: {name: api-token, key: token}}
YAML
until_true 30 pods_running app=secret-consumer 1

say "rotate api-token with a patch"
k patch secret api-token --type merge -p "{\"stringData\":{\"token\":\"$ROTATED\"}}" >/dev/null
[[ $(k get secret api-token -o 'jsonpath={.data.token}' | base64 -d) == "$ROTATED" ]] || { say "rotation did not take"; exit 1; }

say "delete everything"
k delete pod secret-consumer --wait=true --timeout 30s >/dev/null
k delete secret db-credentials api-token --wait=true --timeout 30s >/dev/null
