#!/usr/bin/env bash
# Starts a real, throwaway Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok (fake nodes), built by build-binaries.sh.
# Every process is started in its own session, its PID written under $STATE/pids and stopped by
# cluster-down.sh by that PID only.
#
#   testbed/hack/cluster-up.sh
#
# Environment (all optional):
#   KUBETRAIL_STATE    state directory (default testbed/.state): PKI, kubeconfigs, logs, audit.log, env
#   AUDIT_WEBHOOK_URL  audit webhook target (default http://127.0.0.1:9880/audit/testbed, the
#                      distribution's default k8s_audit endpoint); an absent receiver only costs
#                      apiserver retries, the control plane works regardless
#   AUDIT_POLICY       audit policy file (default testbed/policy/audit-policy.yaml)
#   KWOK_NODES         number of fake nodes (default 1)
#   APISERVER_TRACING_ENDPOINT  host:port of an OTLP gRPC receiver (plain text): the apiserver then
#                      traces every request (KEP-647 TracingConfiguration, samplingRatePerMillion
#                      1000000) and exports there, every 500 ms; unset: no tracing
#   KUBETRAIL_CACHE    binary cache (default ~/.cache/kubetrail), as in build-binaries.sh
#
# Writes $STATE/env, which scripts and tests source: KUBECONFIG, KUBETRAIL_APISERVER, KUBECTL, ...
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
CACHE=${KUBETRAIL_CACHE:-$HOME/.cache/kubetrail}
STATE=${KUBETRAIL_STATE:-$ROOT/testbed/.state}
AUDIT_WEBHOOK_URL=${AUDIT_WEBHOOK_URL:-http://127.0.0.1:9880/audit/testbed}
AUDIT_POLICY=${AUDIT_POLICY:-$ROOT/testbed/policy/audit-policy.yaml}
KWOK_NODES=${KWOK_NODES:-1}
READY_TIMEOUT=${READY_TIMEOUT:-60}

K8S_BIN=$CACHE/bin/k8s-$K8S_VERSION
ETCD=$CACHE/bin/etcd-$ETCD_VERSION/etcd
KWOK_DIR=$CACHE/bin/kwok-$KWOK_VERSION
KWOK=$KWOK_DIR/kwok
KUBECTL=$K8S_BIN/kubectl

log() { printf '[cluster-up] %s\n' "$*" >&2; }
die() { printf '[cluster-up] error: %s\n' "$*" >&2; exit 1; }
now_ms() { date +%s%3N; }

# ---- preflight: name the missing piece ------------------------------------------------------
for b in "$ETCD" "$K8S_BIN/kube-apiserver" "$K8S_BIN/kube-controller-manager" "$K8S_BIN/kube-scheduler" "$KUBECTL" "$KWOK"; do
  [[ -x $b ]] || die "missing binary $b — build it with 'make binaries' (testbed/hack/build-binaries.sh)"
done
for s in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  [[ -f $KWOK_DIR/stage/$s ]] || die "missing kwok stage $KWOK_DIR/stage/$s — rebuild kwok: rm -rf $KWOK_DIR && make binaries"
done
for c in openssl curl; do command -v "$c" >/dev/null || die "'$c' not found on PATH (apt-get install -y $c)"; done
[[ -f $AUDIT_POLICY ]] || die "audit policy $AUDIT_POLICY not found"
case $AUDIT_WEBHOOK_URL in http://*|https://*) ;; *) die "AUDIT_WEBHOOK_URL must be an http(s) URL, got '$AUDIT_WEBHOOK_URL'";; esac

if [[ -d $STATE/pids ]]; then
  for f in "$STATE"/pids/*.pid; do
    [[ -e $f ]] || continue
    if kill -0 "$(cat "$f")" 2>/dev/null; then
      die "a control plane from $STATE is still running ($(basename "$f" .pid) pid $(cat "$f")); stop it with 'make cluster-down' first"
    fi
  done
fi
# The state directory is wiped: only when it is one of ours (or empty).
if [[ -d $STATE && ! -d $STATE/pids && -n $(ls -A "$STATE") ]]; then
  die "$STATE exists and is not a testbed state directory (no pids/); refusing to wipe it"
fi
rm -rf "$STATE"
mkdir -p "$STATE"/{pki,pids,logs,etcd,kwok}
chmod 700 "$STATE"
T_START=$(now_ms)

# ---- free loopback ports (free_port: below the ephemeral range, none picked twice) --------------
# shellcheck source=testbed/hack/lib.bash
source "$ROOT/testbed/hack/lib.bash"
free_port ETCD_PORT; free_port ETCD_PEER_PORT; free_port API_PORT
free_port KCM_PORT; free_port SCHED_PORT; free_port KWOK_PORT
API=https://127.0.0.1:$API_PORT

# ---- throwaway PKI ----------------------------------------------------------------------------
PKI=$STATE/pki
ossl() { openssl "$@" 2>>"$STATE/logs/openssl.log" || die "openssl $1 failed (see $STATE/logs/openssl.log)"; }
ossl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key"
ossl req -x509 -new -key "$PKI/ca.key" -subj "/CN=kubetrail-testbed-ca" -days 7 -out "$PKI/ca.crt" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
# cert NAME SUBJECT EXT: an EC P-256 key and a certificate signed by the testbed CA.
cert() {
  local name=$1 subj=$2 ext=$3
  ossl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key"
  ossl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr"
  printf '%s\n' "$ext" > "$PKI/$name.ext"
  ossl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 7 \
    -extfile "$PKI/$name.ext" -out "$PKI/$name.crt"
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}
CLIENT_EXT=$'keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth'
cert apiserver "/CN=kube-apiserver" $'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local'
cert admin "/O=system:masters/CN=kubernetes-admin" "$CLIENT_EXT"
cert controller-manager "/CN=system:kube-controller-manager" "$CLIENT_EXT"
cert scheduler "/CN=system:kube-scheduler" "$CLIENT_EXT"
# kwok plays every kubelet; its own identity keeps its writes apart from the admin's in audit.
cert kwok "/O=system:masters/CN=kwok" "$CLIENT_EXT"
# Two human writers for scenarios that need distinct actors (conflict).
cert alice "/O=system:masters/CN=alice" "$CLIENT_EXT"
cert bob "/O=system:masters/CN=bob" "$CLIENT_EXT"
# Service-account tokens are signed with RSA: the apiserver's default signing algorithm is RS256.
ossl genrsa -out "$PKI/sa.key" 2048
ossl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"

kubeconfig() { # kubeconfig FILE USER
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: $API
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: $2@testbed
  context: {cluster: testbed, user: $2, namespace: default}
current-context: $2@testbed
EOF
}
kubeconfig "$STATE/kubeconfig" admin
for u in controller-manager scheduler kwok alice bob; do kubeconfig "$STATE/$u.kubeconfig" "$u"; done
cat > "$STATE/audit-webhook.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubetrail
  cluster:
    server: $AUDIT_WEBHOOK_URL
users:
- name: kube-apiserver
  user: {}
contexts:
- name: default
  context: {cluster: kubetrail, user: kube-apiserver}
current-context: default
EOF
T_PKI=$(now_ms)

TRACING_ARGS=()
if [[ -n ${APISERVER_TRACING_ENDPOINT:-} ]]; then
  cat > "$STATE/tracing-config.yaml" <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: TracingConfiguration
endpoint: $APISERVER_TRACING_ENDPOINT
samplingRatePerMillion: 1000000
EOF
  TRACING_ARGS=(--tracing-config-file "$STATE/tracing-config.yaml")
fi

# ---- processes --------------------------------------------------------------------------------
# start NAME BINARY ARGS...: runs in a new session (so a terminal's Ctrl-C or the caller's exit
# does not reach it), output to $STATE/logs/NAME.log, PID to $STATE/pids/NAME.pid.
start() {
  local name=$1; shift
  setsid "$@" >"$STATE/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/pids/$name.pid"
  echo "$name" >> "$STATE/pids/order"
}
alive() { kill -0 "$(cat "$STATE/pids/$1.pid")" 2>/dev/null; }
# wait_for WHAT NAME CMD...: polls CMD every 100 ms; fails naming the process and its log.
wait_for() {
  local what=$1 name=$2; shift 2
  local deadline=$((SECONDS + READY_TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    alive "$name" || { tail -n 20 "$STATE/logs/$name.log" >&2; die "$name exited while waiting for $what (log: $STATE/logs/$name.log)"; }
    (( SECONDS < deadline )) || { tail -n 20 "$STATE/logs/$name.log" >&2; die "timed out after ${READY_TIMEOUT}s waiting for $what (log: $STATE/logs/$name.log)"; }
    sleep 0.1
  done
}
fail_cleanup() { local rc=$?; if (( rc != 0 )); then log "start failed; stopping what was started"; "$ROOT/testbed/hack/cluster-down.sh" >&2 || true; fi; }
trap fail_cleanup EXIT

start etcd "$ETCD" --name testbed --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "testbed=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
wait_for "etcd /health" etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
T_ETCD=$(now_ms)

# OTEL_BSP_*: the OpenTelemetry SDK's batch span processor exports every 500 ms instead of 5 s,
# so a test sees the apiserver's spans about as soon as the audit webhook's, and queues up to 64k
# spans instead of 2048 while the receiver is not listening yet (e2e starts the collector after
# the control plane; the apiserver makes ~1,000 spans a second while it starts).
# --audit-webhook-initial-backoff 1s, not the recommended default of 10 s
# (distribution/apiserver-flags.md): tests refuse batches on purpose and would wait 10 s a retry.
start kube-apiserver env OTEL_BSP_SCHEDULE_DELAY=500 OTEL_BSP_MAX_QUEUE_SIZE=65536 "$K8S_BIN/kube-apiserver" "${TRACING_ARGS[@]}" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" --authorization-mode Node,RBAC \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 --endpoint-reconciler-type none \
  --audit-policy-file "$AUDIT_POLICY" \
  --audit-log-path "$STATE/audit.log" --audit-log-format json --audit-log-maxsize 0 \
  --audit-webhook-config-file "$STATE/audit-webhook.kubeconfig" \
  --audit-webhook-mode batch --audit-webhook-batch-max-wait 1s --audit-webhook-initial-backoff 1s \
  --profiling=false
wait_for "kube-apiserver /readyz" kube-apiserver curl -sf --cacert "$PKI/ca.crt" \
  --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$API/readyz"
T_READYZ=$(now_ms)

# The scheduler retries an unschedulable pod that no cluster change helps only after
# --pod-max-in-unschedulable-pods-duration (5 min by default, checked every 30 s); 5 s makes the
# retry (and so a FailedScheduling Event series) happen within a scenario's time.
# Started only after /readyz: earlier, the controller-manager cannot read
# extension-apiserver-authentication and exits.
start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig "$STATE/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
  --use-service-account-credentials \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --kube-api-qps 200 --kube-api-burst 400 --profiling=false
start kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig "$STATE/scheduler.kubeconfig" \
  --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
  --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --profiling=false \
  --pod-max-in-unschedulable-pods-duration "${SCHED_UNSCHEDULABLE_RETRY:-5s}"
st=$KWOK_DIR/stage
start kwok "$KWOK" --kubeconfig "$STATE/kwok.kubeconfig" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --node-lease-duration-seconds 40 --server-address "127.0.0.1:$KWOK_PORT" \
  --config "$st/node/fast/node-initialize.yaml" --config "$st/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
  --config "$st/pod/fast/pod-ready.yaml" --config "$st/pod/fast/pod-complete.yaml" --config "$st/pod/fast/pod-delete.yaml"

export KUBECONFIG=$STATE/kubeconfig
k() { "$KUBECTL" --request-timeout 10s "$@"; }
nodes=""
for i in $(seq 0 $((KWOK_NODES - 1))); do
  nodes+="---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: \"0\"}
  labels: {kubernetes.io/hostname: kwok-node-$i, kubernetes.io/os: linux, kubernetes.io/arch: amd64, kubernetes.io/role: agent, type: kwok}
status:
  allocatable: {cpu: \"32\", memory: 256Gi, pods: \"110\"}
  capacity: {cpu: \"32\", memory: 256Gi, pods: \"110\"}
"
done
printf '%s' "$nodes" | k apply -f - >"$STATE/logs/nodes.log" 2>&1 || { cat "$STATE/logs/nodes.log" >&2; die "could not create the kwok nodes"; }
node_ready() { [[ $(k get node kwok-node-$((KWOK_NODES - 1)) -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
wait_for "node kwok-node-$((KWOK_NODES - 1)) Ready" kwok node_ready
T_NODE=$(now_ms)
wait_for "ServiceAccount default/default" kube-controller-manager k get serviceaccount default -n default
T_SA=$(now_ms)
wait_for "kube-scheduler /healthz" kube-scheduler curl -sfk "https://127.0.0.1:$SCHED_PORT/healthz"
wait_for "kube-controller-manager /healthz" kube-controller-manager curl -sfk "https://127.0.0.1:$KCM_PORT/healthz"
T_END=$(now_ms)

cat > "$STATE/env" <<EOF
# Generated by testbed/hack/cluster-up.sh; source it.
export KUBETRAIL_STATE=$STATE
export KUBECONFIG=$STATE/kubeconfig
export KUBETRAIL_APISERVER=$API
export KUBETRAIL_ETCD=http://127.0.0.1:$ETCD_PORT
export KUBETRAIL_CA=$PKI/ca.crt
export KUBETRAIL_AUDIT_LOG=$STATE/audit.log
export KUBETRAIL_AUDIT_POLICY=$AUDIT_POLICY
export AUDIT_WEBHOOK_URL=$AUDIT_WEBHOOK_URL
export KUBETRAIL_K8S_VERSION=$K8S_VERSION
export KUBETRAIL_K8S_BIN=$K8S_BIN
export KUBECTL=$KUBECTL
export KWOK_NODES=$KWOK_NODES
export APISERVER_TRACING_ENDPOINT=${APISERVER_TRACING_ENDPOINT:-}
export KUBETRAIL_ALICE_KUBECONFIG=$STATE/alice.kubeconfig
export KUBETRAIL_BOB_KUBECONFIG=$STATE/bob.kubeconfig
EOF
trap - EXIT

ms() { printf '%d.%03d s' $(($1 / 1000)) $(($1 % 1000)); }
T0=$T_PKI
log "control plane up: $API (Kubernetes $K8S_VERSION, $KWOK_NODES kwok node(s))"
log "  PKI and kubeconfigs   $(ms $((T_PKI - T_START)))"
log "  etcd healthy          $(ms $((T_ETCD - T0)))"
log "  apiserver /readyz     $(ms $((T_READYZ - T0)))"
log "  node Ready            $(ms $((T_NODE - T0)))"
log "  default SA            $(ms $((T_SA - T0)))"
log "  all healthy           $(ms $((T_END - T0)))"
log "  audit webhook -> $AUDIT_WEBHOOK_URL, audit log $STATE/audit.log"
[[ -z ${APISERVER_TRACING_ENDPOINT:-} ]] || log "  apiserver traces -> OTLP gRPC $APISERVER_TRACING_ENDPOINT"
log "  export KUBECONFIG=$STATE/kubeconfig   (or: source $STATE/env)"
printf 'timings_ms pki=%d etcd=%d readyz=%d node_ready=%d default_sa=%d all=%d\n' \
  $((T_PKI - T_START)) $((T_ETCD - T0)) $((T_READYZ - T0)) $((T_NODE - T0)) $((T_SA - T0)) $((T_END - T0)) > "$STATE/timings"
