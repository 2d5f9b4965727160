#!/usr/bin/env bash
# notes: Ownership outside Deployments: CronJob nightly (suspended, so it never fires on its own) -> Job nightly-manual created from it with kubectl create job --from (owned by the CronJob) -> 2 Pods run to completion (kwok completes Job pods) -> Job Complete -> the CronJob is deleted and the garbage collector removes the Job and its Pods.
# shellcheck source=testbed/scenarios/lib.bash
source "$(dirname "$0")/lib.bash"
absent cronjob nightly
absent job nightly-manual
until_true 60 no_pods job-name=nightly-manual

say "create suspended CronJob nightly"
k apply -f - >/dev/null <<'YAML'
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
spec:
  schedule: "0 3 * * *"
  suspend: true
  jobTemplate:
    spec:
      completions: 2
      parallelism: 2
      backoffLimit: 0
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: work
            image: registry.k8s.io/busybox:1.36
            command: [sh, -c, "echo nightly"]
YAML

say "create Job nightly-manual from it"
k create job nightly-manual --from=cronjob/nightly >/dev/null
k wait --for=condition=Complete job/nightly-manual --timeout 60s >/dev/null

say "delete the CronJob: the garbage collector removes the Job and its Pods"
k delete cronjob nightly --wait=true --timeout 60s >/dev/null
until_true 60 bash -c "! $KUBECTL get job nightly-manual >/dev/null 2>&1"
until_true 60 no_pods job-name=nightly-manual
