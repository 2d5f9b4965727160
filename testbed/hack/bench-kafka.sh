#!/usr/bin/env bash
# `make bench-kafka`: the two Kafka tiers of docs/operations.md ("Scaling out with Kafka") through
# bin/otelcol-kubetrail, on one machine. The edge: k8s_audit's edge output into the kafka
# exporter (otlp_proto, keyed by the object's resource attributes, acks all, no queue: the webhook
# answers once Kafka has the batch). The processing tier: kafka receiver (one consumer group,
# earliest, a message marked only once the pipeline took it, error_backoff) -> k8s_audit connector
# -> k8s_object_link (Redis ID map on 127.0.0.1:6379 under a key prefix of its own per run,
# owner_wait 0s, no owner_lookup: there is no apiserver) -> otlp_grpc into testbed/cmd/benchaudit's
# sink. The broker is testbed/cmd/kafka (franz-go's kfake, in memory), a fresh one per run.
#
# Two kinds of run, one table row each:
#   lag      the processing replicas start first; benchaudit then posts fresh object trees at RATES
#            for RUN_SECONDS. Row: edge CPU µs and bytes allocated per posted event, the processing
#            replicas' CPU µs per posted event (summed, same interval), lag p50/p99/max, spans lost
#            and duplicated. Lag = when the sink first received an audit span minus when benchaudit
#            started writing the request that carried its event to the edge; an apiserver's own
#            wait to fill a batch comes before that and is not counted. The edge's answer (written
#            to answer read: the webhook and Kafka's ack) is its first part; each span's three
#            times are in build/bench-kafka/<run>.spans.tsv (Unix ns, 0: never arrived).
#   catchup  no processing tier while benchaudit posts OUTAGE worth of events at RATE; then the
#            script starts CATCHUP_REPLICAS replicas. Row: the same, plus the time from their start
#            to the last span and the catch-up rate (audit spans over first to last arrival).
#
#   testbed/hack/bench-kafka.sh                                  # every figure of docs/performance.md
#   RUNS=catchup OUTAGE=20s testbed/hack/bench-kafka.sh          # a quick smoke run of the catch-up
#   RUNS=lag RATES=5000 REPLICAS=2 PROCESSING_QUEUE="off memory-batch" testbed/hack/bench-kafka.sh
#
# Environment:
#   CAPTURE           as bench-audit.sh: testbed/fixtures/audit-webhook-demo.jsonl.gz if present,
#                     else every recorded scenario under testbed/fixtures
#   RUNS              "lag catchup" (default) or one of them
#   RATES             events/s of the lag runs (default "1000 5000")
#   REPLICAS          processing replicas of the lag runs (default "1 2")
#   PROCESSING_QUEUE  the processing tier's otlp_grpc exporter: off (default; the Helm chart's mode
#                     kafka: no sending_queue, so a message is committed once the backend took its
#                     spans) and/or memory-batch (the in-memory sending_queue with batching, flush
#                     200 ms: committed once queued, lost with the process); a list runs each
#   COMPRESSION       the processing tier's otlp_grpc compression: gzip (default, the exporter's
#                     default and the chart's), zstd, snappy or none
#   MERGE             the processing tier's k8s_audit connector: on (default, as shipped: the spans of
#                     the partition workers' concurrent calls go on together, merge.enabled) and/or
#                     off (each message's spans in a call of their own); a list runs each
#   EDGE_SHARDS       the edge's k8s_audit edge.shards: 0 (default, as the chart and kafka-edge.yaml
#                     ship: a message per object of a batch) or a number (a batch's objects in at
#                     most that many messages); a list runs each
#   PARTITION_WORKERS 1 (default, as the chart ships): the kafka receiver's
#                     partition_processing.independent, a worker per partition; 0: the receiver's
#                     default (a poll's partitions handled together, the next poll waits for all)
#   IN_FLIGHT         the kafka receiver's partition_processing.max_in_flight.records: 4 (default, as
#                     the chart ships: that many of a partition's messages in the pipeline at once,
#                     each still committed only once the backend took its spans, in order;
#                     max_in_flight.bytes 16 MiB) or 1 (one after the other, the default with
#                     PARTITION_WORKERS=0); a list runs each. Above 1 needs PARTITION_WORKERS=1. The line "processing:" counts the diffs skipped and
#                     why, and the calls converted out of offset order (ORDER)
#   ORDER             the processing tier's k8s_audit connector: on (default, as shipped: a partition's
#                     calls converted in offset order, offset_order.max_wait 250ms) and/or off
#                     (max_wait 0s: messages in flight together converted as they come); a list runs
#                     each. Only matters with IN_FLIGHT above 1
#   RUN_SECONDS       how long a lag run sends (default 60)
#   OUTAGE            how long the processing tier is down in the catch-up run, 20s, 5m or seconds
#                     (default 5m)
#   RATE              events/s during the outage (default 1000)
#   CATCHUP_REPLICAS  processing replicas that drain the backlog (default 2)
#   CONNS             connections benchaudit spreads its batches over (default 4: an apiserver sends
#                     batches concurrently, and the edge answers each only once Kafka acked it)
#   PARTITIONS        partitions of the topic (default 4)
#   BATCH             events per webhook body (benchaudit -batch): the capture's events regrouped in
#                     order, as an apiserver under load fills its batches (up to
#                     --audit-webhook-batch-max-size, 400); a body never spans two passes, so at most
#                     the capture's events (271 for the recorded scenarios); 0 (default): the
#                     recorded bodies
#   WORKLOAD          fresh (default: new objects every pass) or replay
#   COLLECTOR         default bin/otelcol-kubetrail (`make bench-kafka` builds it)
#   REDIS             the Redis of the ID map (default 127.0.0.1:6379; `make bench-kafka` starts one)
#   ID_MAP_ENTRIES    the processing tier's id_map.memory.max_entries, the records its copy of the ID
#                     map in memory keeps in front of Redis (default: the processor's, 1,000,000)
#   SAMPLE            seconds: in each lag run, every SAMPLE seconds print the edge's and the first
#                     processing replica's RSS, Go heap, goroutines and open fds, and at the end the
#                     RSS slope of each from SAMPLE_FROM seconds (default 120) on: `make soak`
#   PROFILE           1: in each lag run, a CPU profile of the edge and of the first processing replica
#                     (PROFILE_SECONDS, default 20, from 5 s after the first request), and where
#                     their CPU goes (build/bench-kafka/<run>.{edge,processing}.cpu.pprof), and what
#                     the edge allocated over that window (<run>.edge.allocs.pprof, less .allocs0.pprof)
# Everything it starts is stopped by PID; logs, configs and rows in build/bench-kafka/. Each run's
# Redis keys (prefix bench-kafka-<time>-<run>:) are deleted after it when redis-cli is installed;
# otherwise they expire with the window and its grace (about 32 minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."

export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=${GOFLAGS:--trimpath}
OUT=build/bench-kafka
COLLECTOR=${COLLECTOR:-bin/otelcol-kubetrail}
RUNS=${RUNS:-lag catchup}
RATES=${RATES:-1000 5000}
REPLICAS=${REPLICAS:-1 2}
PROCESSING_QUEUE=${PROCESSING_QUEUE:-off}
COMPRESSION=${COMPRESSION:-gzip}
PARTITION_WORKERS=${PARTITION_WORKERS:-1}
MERGE=${MERGE:-on}
EDGE_SHARDS=${EDGE_SHARDS:-0}
IN_FLIGHT=${IN_FLIGHT:-$([[ $PARTITION_WORKERS == 1 ]] && echo 4 || echo 1)}
ORDER=${ORDER:-on}
SAMPLE=${SAMPLE:-}
SAMPLE_FROM=${SAMPLE_FROM:-120}
RUN_SECONDS=${RUN_SECONDS:-60}
OUTAGE=${OUTAGE:-5m}
RATE=${RATE:-1000}
CATCHUP_REPLICAS=${CATCHUP_REPLICAS:-2}
CONNS=${CONNS:-4}
PARTITIONS=${PARTITIONS:-4}
BATCH=${BATCH:-0}
WORKLOAD=${WORKLOAD:-fresh}
REDIS=${REDIS:-127.0.0.1:6379}
ID_MAP_ENTRIES=${ID_MAP_ENTRIES:-}
PROFILE=${PROFILE:-0}
PROFILE_SECONDS=${PROFILE_SECONDS:-20}
TOPIC=kube-audit

die() { echo "bench-kafka: $*" >&2; exit 1; }
# shellcheck source=testbed/hack/lib.bash
source testbed/hack/lib.bash
CAPTURE=${CAPTURE:-$(default_capture)}
seconds_of() { # seconds_of 90 | 20s | 5m | 1h
  local v=$1 n m
  case $v in
    *h) n=${v%h} m=3600 ;;
    *m) n=${v%m} m=60 ;;
    *s) n=${v%s} m=1 ;;
    *) n=$v m=1 ;;
  esac
  [[ $n =~ ^[0-9]+$ ]] || die "$v is not a duration (20s, 5m, 1h or seconds)"
  echo $((n * m))
}
[[ -x $COLLECTOR ]] || die "$COLLECTOR is missing: run make build first"
OUTAGE_S=$(seconds_of "$OUTAGE")
for v in RUN_SECONDS RATE CATCHUP_REPLICAS CONNS PARTITIONS PROFILE_SECONDS SAMPLE_FROM ${SAMPLE:+SAMPLE} ${ID_MAP_ENTRIES:+ID_MAP_ENTRIES}; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: want a positive number"
done
[[ $BATCH =~ ^[0-9]+$ ]] || die "BATCH=$BATCH: want 0 or a number of events"
[[ $PARTITION_WORKERS == 0 || $PARTITION_WORKERS == 1 ]] || die "PARTITION_WORKERS=$PARTITION_WORKERS: want 0 or 1"
case $COMPRESSION in none | gzip | zstd | snappy) ;; *) die "COMPRESSION=$COMPRESSION: want gzip, zstd, snappy or none" ;; esac
for q in $PROCESSING_QUEUE; do
  [[ $q == off || $q == memory-batch ]] || die "PROCESSING_QUEUE=$q: want off or memory-batch"
done
for m in $MERGE; do
  [[ $m == on || $m == off ]] || die "MERGE=$m: want on and/or off"
done
for e in $EDGE_SHARDS; do
  [[ $e =~ ^[0-9]+$ ]] || die "EDGE_SHARDS=$e: want 0 or a number of shards"
done
for r in $RUNS; do
  [[ $r == lag || $r == catchup ]] || die "RUNS=$r: want lag and/or catchup"
done
for o in $ORDER; do
  [[ $o == on || $o == off ]] || die "ORDER=$o: want on and/or off"
done
for f in $IN_FLIGHT; do
  [[ $f =~ ^[1-9][0-9]*$ ]] || die "IN_FLIGHT=$f: want a positive number of messages"
  [[ $f == 1 || $PARTITION_WORKERS == 1 ]] || die "IN_FLIGHT=$f needs PARTITION_WORKERS=1 (IN_FLIGHT=1 goes without)"
done
(exec 3<>"/dev/tcp/${REDIS%:*}/${REDIS##*:}") 2>/dev/null || die "no Redis answers on $REDIS (make redis starts one)"

mkdir -p "$OUT"
go build -o "$OUT/benchaudit" ./testbed/cmd/benchaudit
go build -o "$OUT/kafka" ./testbed/cmd/kafka

# Every process this script started and has not stopped yet, and the run's Redis prefix.
PIDS=()
BA_PID="" PREFIX=""
stop_all() {
  local pid i
  if [[ -n $BA_PID ]]; then
    kill "$BA_PID" 2>/dev/null || true
    wait "$BA_PID" 2>/dev/null || true
    BA_PID=""
  fi
  # The processing replicas and the edge first, the broker last (it was started first).
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    pid=${PIDS[$i]}
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
  [[ -n $PREFIX ]] && delete_prefix "$PREFIX"
  PREFIX=""
  return 0
}

# The ID map's keys are binary (a newline may be part of one), so they are deleted in Redis itself,
# one SCAN page per call, never read back through the shell.
delete_prefix() { # delete_prefix PREFIX
  command -v redis-cli >/dev/null || return 0
  local cursor=0 page
  local lua='local r = redis.call("SCAN", ARGV[1], "MATCH", ARGV[2], "COUNT", 1000)
for _, k in ipairs(r[2]) do redis.call("UNLINK", k) end
return r[1]'
  for _ in $(seq 100000); do
    page=$(redis-cli -h "${REDIS%:*}" -p "${REDIS##*:}" --raw eval "$lua" 0 "$cursor" "$1*") || return 0
    cursor=$page
    [[ $cursor == 0 ]] && return 0
  done
}
trap stop_all EXIT
trap 'exit 130' INT TERM


pprof() { # pprof PORT: the pprof extension on PORT, nothing for no port
  [[ -n $1 ]] || return 0
  cat <<EOF
extensions:
  pprof: {endpoint: 127.0.0.1:$1}
EOF
}

telemetry() { # telemetry METRICS_PORT [PPROF_PORT]: the service's telemetry (and extensions) block
  [[ -n ${2:-} ]] && echo "  extensions: [pprof]"
  cat <<EOF
  telemetry:
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: $1}
EOF
}

# The edge of distribution/examples/kafka-edge.yaml and the chart's mode kafka.
edge_config() { # edge_config FILE
  cat >"$1" <<EOF
$(pprof "$EDGE_PPROF")
receivers:
  k8s_audit:
    endpoint: 127.0.0.1:$EDGE_PORT
    cluster: bench
    edge: {shards: $EDGE_SHARDS_NOW}
exporters:
  kafka:
    brokers: ["$BOOTSTRAP"]
    logs:
      topic: $TOPIC
      encoding: otlp_proto
    partition_logs_by_resource_attributes: true
    producer:
      required_acks: all
      allow_auto_topic_creation: false
      max_message_bytes: 8388608
    sending_queue:
      enabled: false
    timeout: 10s
    retry_on_failure: {enabled: true, initial_interval: 1s, max_interval: 5s, max_elapsed_time: 20s}
service:
$(telemetry "$EDGE_METRICS" "$EDGE_PPROF")
  pipelines:
    logs/edge:
      receivers: [k8s_audit]
      exporters: [kafka]
EOF
}

# The processing tier of the chart's mode kafka, without owner_lookup (no apiserver here) and with
# the run's own Redis key prefix.
processing_config() { # processing_config FILE METRICS_PORT QUEUE [PPROF_PORT]
  local queue="    sending_queue:
      enabled: false"
  if [[ $3 == memory-batch ]]; then
    queue="    sending_queue:
      enabled: true
      batch: {flush_timeout: 200ms}"
  fi
  cat >"$1" <<EOF
$(pprof "${4:-}")
receivers:
  kafka:
    brokers: ["$BOOTSTRAP"]
    logs:
      topics: [$TOPIC]
      encoding: otlp_proto
    group_id: kubetrail-processing
    initial_offset: earliest
    message_marking: {after: true, on_error: false}
    error_backoff: {enabled: true, initial_interval: 1s, max_interval: 30s, max_elapsed_time: 5m}$([[ $PARTITION_WORKERS == 1 ]] && printf '\n    partition_processing: {independent: true%s}' "$( ((IN_FLIGHT_NOW > 1)) && echo ", max_in_flight: {records: $IN_FLIGHT_NOW, bytes: 16777216}")")
connectors:
  k8s_audit:
    cluster_attribute: k8s.cluster.name
    merge: {enabled: $([[ $MERGE_NOW == on ]] && echo true || echo false)}$([[ $ORDER_NOW == off ]] && printf '\n    offset_order: {max_wait: 0s}')
processors:
  k8s_object_link:
    owner_wait: 0s
    id_map:
      backend: redis
      redis:
        addresses: ["$REDIS"]
        key_prefix: "$PREFIX"$([[ -n $ID_MAP_ENTRIES ]] && printf '\n      memory: {max_entries: %s}' "$ID_MAP_ENTRIES")
exporters:
  otlp_grpc:
    endpoint: 127.0.0.1:$SINK_PORT
    tls: {insecure: true}
    compression: $COMPRESSION
$queue
    retry_on_failure: {enabled: true, initial_interval: 5s, max_interval: 30s, max_elapsed_time: 0}
service:
$(telemetry "$2" "${4:-}")
  pipelines:
    logs/audit:
      receivers: [kafka]
      exporters: [k8s_audit]
    traces:
      receivers: [k8s_audit]
      processors: [k8s_object_link]
      exporters: [otlp_grpc]
EOF
}

wait_metrics() { # wait_metrics PID PORT LOG: until the collector's metrics endpoint answers
  for _ in $(seq 300); do
    curl -fsS -o /dev/null "http://127.0.0.1:$2/metrics" 2>/dev/null && return
    kill -0 "$1" 2>/dev/null || { tail -20 "$3" >&2; die "a collector exited (log: $3)"; }
    sleep 0.1
  done
  die "a collector did not start within 30 s (log: $3)"
}

start_broker() { # start_broker NAME: a fresh in-memory broker with the topic; sets BOOTSTRAP
  local addr=$OUT/$1.kafka.addr
  : >"$addr"
  "$OUT/kafka" -topic "$TOPIC:$PARTITIONS" >"$addr" 2>"$OUT/$1.kafka.log" &
  KAFKA_PID=$!
  PIDS+=("$KAFKA_PID")
  for _ in $(seq 100); do
    BOOTSTRAP=$(head -1 "$addr")
    [[ -n $BOOTSTRAP ]] && return
    kill -0 "$KAFKA_PID" 2>/dev/null || die "the broker exited (log: $OUT/$1.kafka.log)"
    sleep 0.1
  done
  die "the broker did not start within 10 s"
}

start_edge() { # start_edge NAME [profile]: with profile, the pprof extension on EDGE_PPROF
  free_port EDGE_PORT
  free_port EDGE_METRICS
  EDGE_PPROF=""
  [[ ${2:-} == profile ]] && free_port EDGE_PPROF
  edge_config "$OUT/$1.edge.yaml"
  "$COLLECTOR" --config "$OUT/$1.edge.yaml" >"$OUT/$1.edge.log" 2>&1 &
  EDGE_PID=$!
  PIDS+=("$EDGE_PID")
  wait_metrics "$EDGE_PID" "$EDGE_METRICS" "$OUT/$1.edge.log"
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$EDGE_PORT") 2>/dev/null && return
    sleep 0.1
  done
  die "the edge's webhook does not listen (log: $OUT/$1.edge.log)"
}

start_processing() { # start_processing NAME N QUEUE [profile]: N replicas; their PIDs into $OUT/NAME.pids
  local i port
  PROC_PIDS=() PROC_PORTS=() PROC_LOGS=() PROC_PPROF=""
  [[ ${4:-} == profile ]] && free_port PROC_PPROF
  for i in $(seq "$2"); do
    free_port port
    # With profile, the first replica has the pprof extension.
    processing_config "$OUT/$1.processing-$i.yaml" "$port" "$3" "$( ((i == 1)) && echo "$PROC_PPROF")"
    "$COLLECTOR" --config "$OUT/$1.processing-$i.yaml" >"$OUT/$1.processing-$i.log" 2>&1 &
    PIDS+=("$!")
    PROC_PIDS+=("$!") PROC_PORTS+=("$port") PROC_LOGS+=("$OUT/$1.processing-$i.log")
  done
  echo "${PROC_PIDS[*]}" >"$OUT/$1.pids"
}

wait_settled() { # wait until every replica was given a partition, then SETTLE seconds more
  local i
  for i in "${!PROC_PIDS[@]}"; do
    wait_metrics "${PROC_PIDS[$i]}" "${PROC_PORTS[$i]}" "${PROC_LOGS[$i]}"
  done
  for _ in $(seq 600); do
    local all=1
    for i in "${!PROC_LOGS[@]}"; do
      grep -q "\"assigned\": \"$TOPIC\[" "${PROC_LOGS[$i]}" || all=0
      kill -0 "${PROC_PIDS[$i]}" 2>/dev/null || die "a processing replica exited (log: ${PROC_LOGS[$i]})"
    done
    if ((all)); then
      # A later joiner's rebalance takes a moment to reach the first one.
      sleep "${SETTLE:-3}"
      return
    fi
    sleep 0.1
  done
  die "the processing replicas were not all given partitions within 60 s (logs: ${PROC_LOGS[*]})"
}

wait_file() { # wait_file PATH: until benchaudit created it (or exited)
  until [[ -e $1 ]]; do
    kill -0 "$BA_PID" 2>/dev/null || { wait "$BA_PID" || true; BA_PID=""; die "benchaudit exited early"; }
    sleep 0.1
  done
}

replicas() { if (($1 == 1)); then echo "1 replica"; else echo "$1 replicas"; fi; }

peak_mib() { # peak_mib PID: VmHWM in MiB
  awk '/^VmHWM:/ { printf "%d", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo "?"
}

# What the processing replicas report after a run: spans dropped as redelivered duplicates.
dropped_duplicates() {
  local port sum=0 v
  for port in "${PROC_PORTS[@]}"; do
    v=$(curl -fsS "http://127.0.0.1:$port/metrics" 2>/dev/null |
      awk '/^otelcol_k8s_object_link_spans_dropped/ && /reason="duplicate"/ { s += $NF } END { printf "%d", s }') || v=0
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

ROWS=$OUT/rows.tsv
: >"$ROWS"
FAILED=0
RUN_ID=$(date +%s)
N=0
benchaudit_args() { # benchaudit_args NAME: the flags every run shares
  BA_ARGS=(-url "http://127.0.0.1:$EDGE_PORT/audit/bench" -sink "127.0.0.1:$SINK_PORT" -pid "$EDGE_PID"
    -metrics "http://127.0.0.1:$EDGE_METRICS/metrics" -capture "$CAPTURE" -workload "$WORKLOAD"
    -report tiers -conns "$CONNS" -batch "$BATCH" -clk-tck "$(getconf CLK_TCK)" -row "$OUT/row.tsv" -spans-file "$OUT/$1.spans.tsv")
}

# Everything runs on one machine: how busy it was tells a tier's limit from the machine's.
machine_mark() { # machine_mark: the machine's busy and total jiffies and Redis's CPU seconds, now
  local _cpu user nice sys idle iowait irq softirq steal
  read -r _cpu user nice sys idle iowait irq softirq steal _ </proc/stat
  MARK_BUSY=$((user + nice + sys + irq + softirq + steal)) MARK_TOTAL=$((user + nice + sys + idle + iowait + irq + softirq + steal))
  MARK_REDIS=$(redis_cpu)
}

redis_cpu() { # Redis's CPU seconds (user + sys), 0 without redis-cli
  command -v redis-cli >/dev/null || { echo 0; return; }
  redis-cli -h "${REDIS%:*}" -p "${REDIS##*:}" info cpu 2>/dev/null |
    awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.2f", s }'
}

cpu_seconds() { # cpu_seconds PID: utime + stime
  awk -v tck="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / tck }' "/proc/$1/stat" 2>/dev/null || echo 0
}

finish_row() { # finish_row: benchaudit's row plus broker and processing peak RSS, dropped duplicates, the machine
  local rss="" pid busy total events broker redis _cpu user nice sys idle iowait irq softirq steal
  for pid in "${PROC_PIDS[@]}"; do rss+="${rss:+, }$(peak_mib "$pid")"; done
  read -r _cpu user nice sys idle iowait irq softirq steal _ </proc/stat
  busy=$((user + nice + sys + irq + softirq + steal - MARK_BUSY))
  total=$((user + nice + sys + idle + iowait + irq + softirq + steal - MARK_TOTAL))
  busy=$(awk -v b="$busy" -v t="$total" -v n="$(nproc)" 'BEGIN { printf "%.2f", (t > 0 ? b / t * n : 0) }')
  broker=$(cpu_seconds "$KAFKA_PID")
  redis=$(awk -v a="$MARK_REDIS" -v b="$(redis_cpu)" 'BEGIN { printf "%.2f", b - a }')
  echo "   machine: $busy of $(nproc) cores busy on average since the $1; CPU seconds: broker $broker (since its start), Redis $redis"
  if [[ -s $OUT/row.tsv ]]; then
    events=$(cut -f3 "$OUT/row.tsv")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(cat "$OUT/row.tsv")" "$(peak_mib "$KAFKA_PID")" "$rss" "$(dropped_duplicates)" \
      "$(awk -v c="$broker" -v e="$events" 'BEGIN { printf "%.1f", (e > 0 ? c / e * 1e6 : 0) }')" "$busy" >>"$ROWS"
  fi
  rm -f "$OUT/row.tsv"
}

# merged_line: how many of the messages the replicas consumed went downstream with others
# (the connector's merge), summed over the replicas.
merged_line() {
  local port merged=0 messages=0 refused=0 notseen=0 order=0 gaps=0 late=0 m
  sum() { awk -v name="^$1" -v label="${2:-}" '$0 ~ name && (label == "" || index($0, label)) { s += $NF } END { printf "%d", s }' <<<"$m"; }
  for port in "${PROC_PORTS[@]}"; do
    m=$(curl -fsS "http://127.0.0.1:$port/metrics" 2>/dev/null || true)
    merged=$((merged + $(sum otelcol_k8s_audit_merged_calls)))
    messages=$((messages + $(sum otelcol_kafka_receiver_messages)))
    refused=$((refused + $(sum otelcol_k8s_audit_in_flight_refused)))
    notseen=$((notseen + $(sum otelcol_k8s_audit_diffs_skipped 'reason="base_not_seen"')))
    order=$((order + $(sum otelcol_k8s_audit_diffs_skipped 'reason="out_of_order"')))
    gaps=$((gaps + $(sum otelcol_k8s_audit_offset_order_skips 'reason="gap"')))
    late=$((late + $(sum otelcol_k8s_audit_offset_order_skips 'reason="late"')))
  done
  echo "   processing: $messages messages consumed, $merged of them handed on with others (merge), $refused calls refused for want of max_in_flight_bytes (retried after error_backoff); diffs skipped: $notseen base_not_seen, $order out_of_order; out of offset order: $gaps after a gap, $late late"
}

lag_run() { # lag_run RATE REPLICAS QUEUE
  local name label
  N=$((N + 1))
  name="lag-$1-$2-$3-merge-$MERGE_NOW-shards-$EDGE_SHARDS_NOW-$COMPRESSION-inflight-$IN_FLIGHT_NOW-order-$ORDER_NOW"
  label="$1/s, $(replicas "$2"), queue $3, merge $MERGE_NOW, edge shards $EDGE_SHARDS_NOW, export $COMPRESSION, in flight $IN_FLIGHT_NOW, offset order $ORDER_NOW${ID_MAP_ENTRIES:+, ID map in memory $ID_MAP_ENTRIES records}"
  PREFIX="bench-kafka-$RUN_ID-$N:"
  free_port SINK_PORT
  local profile="" prof_pids=() samplers=() what pid
  # The pprof extension: for the CPU profiles, and for the samplers' goroutine counts.
  [[ $PROFILE == 1 || -n $SAMPLE ]] && profile=profile
  start_broker "$name"
  start_edge "$name" "$profile"
  echo "== $label (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  rm -f "$OUT/$name.ready" "$OUT/$name.pids"
  benchaudit_args "$name"
  # The sink listens before the replicas start (their exporter connects at once), and nothing is
  # sent before every replica holds partitions.
  # A tier that falls behind drains for longer than benchaudit's default 2 minutes.
  "$OUT/benchaudit" "${BA_ARGS[@]}" -label "$label" -rate "$1" -events $(($1 * RUN_SECONDS)) -drain-timeout 30m \
    -ready-file "$OUT/$name.ready" -extra-pids-file "$OUT/$name.pids" >"$OUT/$name.out" 2>&1 &
  BA_PID=$!
  wait_file "$OUT/$name.ready"
  start_processing "$name" "$2" "$3" "$profile"
  wait_settled
  machine_mark
  rm -f "$OUT/$name.ready"
  if [[ -n $SAMPLE ]]; then
    sample_loop "$EDGE_PID" "$OUT/$name.edge.samples.tsv" "$EDGE_METRICS" "$EDGE_PPROF" edge &
    samplers+=("$!")
    sample_loop "${PROC_PIDS[0]}" "$OUT/$name.processing.samples.tsv" "${PROC_PORTS[0]}" "$PROC_PPROF" processing &
    samplers+=("$!")
  fi
  if [[ $PROFILE == 1 ]]; then
    # Five seconds in, both tiers are at the run's pace.
    # The edge's allocations over the same window: the allocs profile before and after it.
    (sleep 5 && curl -fsS -o "$OUT/$name.edge.allocs0.pprof" "http://127.0.0.1:$EDGE_PPROF/debug/pprof/allocs" &&
      curl -fsS -o "$OUT/$name.edge.cpu.pprof" "http://127.0.0.1:$EDGE_PPROF/debug/pprof/profile?seconds=$PROFILE_SECONDS" &&
      curl -fsS -o "$OUT/$name.edge.allocs.pprof" "http://127.0.0.1:$EDGE_PPROF/debug/pprof/allocs") &
    prof_pids+=("$!")
    (sleep 5 && curl -fsS -o "$OUT/$name.processing.cpu.pprof" "http://127.0.0.1:$PROC_PPROF/debug/pprof/profile?seconds=$PROFILE_SECONDS") &
    prof_pids+=("$!")
  fi
  if wait "$BA_PID"; then :; else echo "   benchaudit failed"; FAILED=1; fi
  BA_PID=""
  for pid in "${samplers[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  merged_line
  if [[ -n $SAMPLE ]]; then
    sample_summary "$OUT/$name.edge.samples.tsv" " (edge)"
    sample_summary "$OUT/$name.processing.samples.tsv" " (processing)"
  fi
  sed 's/^/   /' "$OUT/$name.out"
  for pid in "${prof_pids[@]}"; do
    wait "$pid" || echo "   a CPU profile failed (a run shorter than PROFILE_SECONDS + 5 s?)"
  done
  for what in edge processing; do
    if [[ -s $OUT/$name.$what.cpu.pprof ]]; then
      echo "   where the $what's CPU went ($OUT/$name.$what.cpu.pprof, cumulative, top functions):"
      go tool pprof -top -cum -nodecount=35 "$OUT/$name.$what.cpu.pprof" 2>/dev/null | sed -n '6,41p' | sed 's/^/     /'
    fi
  done
  if [[ -s $OUT/$name.edge.allocs.pprof ]]; then
    echo "   what the edge allocated over the same window ($OUT/$name.edge.allocs.pprof less .allocs0.pprof, bytes, top functions):"
    go tool pprof -top -sample_index=alloc_space -nodecount=25 -base "$OUT/$name.edge.allocs0.pprof" \
      "$OUT/$name.edge.allocs.pprof" 2>/dev/null | sed -n '6,31p' | sed 's/^/     /'
  fi
  finish_row "first request"
  stop_all
}

catchup_run() { # catchup_run REPLICAS QUEUE
  local name label
  N=$((N + 1))
  name="catchup-$OUTAGE_S-$1-$2-merge-$MERGE_NOW-shards-$EDGE_SHARDS_NOW-$COMPRESSION-inflight-$IN_FLIGHT_NOW-order-$ORDER_NOW"
  label="catch-up after $OUTAGE at $RATE/s, $(replicas "$1"), queue $2, merge $MERGE_NOW, edge shards $EDGE_SHARDS_NOW, export $COMPRESSION, in flight $IN_FLIGHT_NOW, offset order $ORDER_NOW${ID_MAP_ENTRIES:+, ID map in memory $ID_MAP_ENTRIES records}"
  PREFIX="bench-kafka-$RUN_ID-$N:"
  free_port SINK_PORT
  start_broker "$name"
  start_edge "$name"
  echo "== $label (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  rm -f "$OUT/$name.pause" "$OUT/$name.pids"
  benchaudit_args "$name"
  # The drain gives up after 5 × quiet without a span: the replicas' start and group join come first.
  "$OUT/benchaudit" "${BA_ARGS[@]}" -label "$label" -rate "$RATE" -events $((RATE * OUTAGE_S)) \
    -pause-file "$OUT/$name.pause" -extra-pids-file "$OUT/$name.pids" -quiet 5s -drain-timeout 60m >"$OUT/$name.out" 2>&1 &
  BA_PID=$!
  wait_file "$OUT/$name.pause"
  echo "   $((RATE * OUTAGE_S)) events in Kafka, broker peak RSS $(peak_mib "$KAFKA_PID") MiB; starting $1 processing replica(s)"
  machine_mark
  start_processing "$name" "$1" "$2"
  rm -f "$OUT/$name.pause"
  if wait "$BA_PID"; then :; else echo "   benchaudit failed"; FAILED=1; fi
  BA_PID=""
  merged_line
  sed 's/^/   /' "$OUT/$name.out"
  finish_row "processing tier's start"
  stop_all
}

echo "bench-kafka: $(nproc) cores, capture $CAPTURE, $WORKLOAD workload, $PARTITIONS partitions, $CONNS connections, batches of $( ((BATCH > 0)) && echo "$BATCH events" || echo "the recording")"
for run in $RUNS; do
  for queue in $PROCESSING_QUEUE; do
    for MERGE_NOW in $MERGE; do
      for EDGE_SHARDS_NOW in $EDGE_SHARDS; do
        for IN_FLIGHT_NOW in $IN_FLIGHT; do
          for ORDER_NOW in $ORDER; do
            if [[ $run == lag ]]; then
              for rate in $RATES; do
                for replicas in $REPLICAS; do
                  lag_run "$rate" "$replicas" "$queue"
                done
              done
            else
              catchup_run "$CATCHUP_REPLICAS" "$queue"
            fi
          done
        done
      done
    done
  done
done

{
  echo
  echo "bench-kafka, $(date -u +%FT%TZ), $(nproc) cores, capture $CAPTURE, $WORKLOAD, $PARTITIONS partitions, $CONNS connections, batches of $( ((BATCH > 0)) && echo "$BATCH events" || echo "the recording")"
  echo "| run | workload | events posted | events/s | edge CPU µs per event | edge bytes allocated per event | edge peak RSS (MiB) | processing CPU µs per event | lag p50 (ms) | lag p99 (ms) | lag max (ms) | the edge's answer p99 (ms) | audit spans expected / arrived / lost | duplicates at the sink | HTTP answers | processing start to drained (s) | catch-up (audit spans/s) | broker peak RSS (MiB) | processing peak RSS (MiB) | redeliveries dropped by the marks | broker CPU µs per event | machine busy (cores) |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  awk -F'\t' '{ line = "|"; for (i = 1; i <= NF; i++) line = line " " $i " |"; print line }' "$ROWS"
} | tee "$OUT/table.md"
((FAILED == 0)) || die "a run failed"
awk -F'\t' '{ split($13, a, " / "); if (a[3] != 0 || $14 != 0) bad = 1 } END { exit bad }' "$ROWS" || die "a run lost or duplicated audit spans"
