#!/usr/bin/env bash
# End-to-end throughput and cost of the real bin/otelcol-kubetrail: for each run, start the
# collector on a generated config (k8s_audit on a free loopback port -> k8s_object_link -> batch ->
# debug exporter at basic verbosity, its log sampled to one line a second: the cheapest sink that
# still goes through a real exporter), drive it with testbed/cmd/loadgen (recorded webhook bodies,
# each copy a fresh set of objects), sample the collector's CPU time and RSS from /proc, read its
# own metrics from the Prometheus endpoint, and print one table row.
#
#   testbed/hack/loadtest.sh                       # the default runs below
#   LOADTEST_RUNS="memory:Metadata:0 redis:RequestResponse:1000" testbed/hack/loadtest.sh
#
# A run is BACKEND:LEVEL:RATE: BACKEND memory or redis (the processor's id_map, Redis at
# 127.0.0.1:6379 under a key prefix of its own, deleted afterwards), LEVEL RequestResponse (the
# bodies as recorded) or Metadata (loadgen -metadata-only), RATE events/s (0 = as fast as the
# collector answers). LOADTEST_DURATION (30s), LOADTEST_CONNECTIONS (4). Needs bin/otelcol-kubetrail
# (`make build`), go, curl, and redis-cli for the redis runs. Everything it starts is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${LOADTEST_DURATION:-30s}
CONNECTIONS=${LOADTEST_CONNECTIONS:-4}
RUNS=${LOADTEST_RUNS:-"memory:RequestResponse:0 memory:Metadata:0 redis:RequestResponse:0 redis:Metadata:0 memory:RequestResponse:1000 redis:RequestResponse:1000"}
REDIS_HOST=127.0.0.1 REDIS_PORT=6379
OUT=build/loadtest
COLLECTOR=bin/otelcol-kubetrail

die() { echo "loadtest: $*" >&2; exit 1; }
# shellcheck source=testbed/hack/lib.bash
source testbed/hack/lib.bash
[[ -x $COLLECTOR ]] || die "$COLLECTOR is missing: run make build first"
command -v curl >/dev/null || die "curl is missing"
mkdir -p "$OUT"
go build -o "$OUT/loadgen" ./testbed/cmd/loadgen
if [[ $RUNS == *redis:* ]]; then
  command -v redis-cli >/dev/null || die "redis-cli is missing (testbed/hack/ensure-redis.sh installs it)"
  redis-cli -h $REDIS_HOST -p $REDIS_PORT ping 2>/dev/null | grep -q PONG || die "no Redis on $REDIS_HOST:$REDIS_PORT (make redis)"
fi

COL_PID="" LG_PID="" PREFIX="" REDIS_KEYS=-
# redis_prefix COUNT|UNLINK: counts or deletes the keys under $PREFIX, server-side (dedup-mark keys
# hold binary span IDs, which redis-cli --scan | xargs would mangle).
redis_prefix() {
  redis-cli -h $REDIS_HOST -p $REDIS_PORT EVAL 'local c, n = "0", 0
    repeat
      local r = redis.call("SCAN", c, "MATCH", ARGV[1], "COUNT", 1000)
      c = r[1]
      for _, k in ipairs(r[2]) do
        if ARGV[2] == "UNLINK" then redis.call("UNLINK", k) end
        n = n + 1
      end
    until c == "0"
    return n' 0 "${PREFIX}*" "$1"
}
cleanup() {
  if [[ -n $LG_PID ]]; then
    kill "$LG_PID" 2>/dev/null || true
    wait "$LG_PID" 2>/dev/null || true
    LG_PID=""
  fi
  if [[ -n $COL_PID ]]; then
    kill "$COL_PID" 2>/dev/null || true
    wait "$COL_PID" 2>/dev/null || true
    COL_PID=""
  fi
  if [[ -n $PREFIX ]]; then
    REDIS_KEYS=$(redis_prefix UNLINK) || true
    PREFIX=""
  fi
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM


CLK_TCK=$(getconf CLK_TCK)
# cpu_ticks PID: user + system time in clock ticks (fields 14 and 15 of /proc/PID/stat; the
# command name in field 2 has no spaces here).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# metric NAME: the sum of every series of NAME on the collector's Prometheus endpoint.
metric() { curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null | metric_sum "$1" 1 0; }

write_config() { # write_config FILE BACKEND
  local idmap="{backend: memory}"
  [[ $2 == redis ]] && idmap="{backend: redis, redis: {addresses: [\"$REDIS_HOST:$REDIS_PORT\"], key_prefix: \"$PREFIX\"}}"
  cat >"$1" <<EOF
receivers:
  k8s_audit:
    endpoint: 127.0.0.1:$AUDIT_PORT
    cluster: loadtest
processors:
  k8s_object_link:
    window: 30m
    id_map: $idmap
  batch: {}
exporters:
  debug:
    verbosity: basic
    sampling_initial: 1
    sampling_thereafter: 1000000
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus: {host: 127.0.0.1, port: $METRICS_PORT}
  pipelines:
    traces:
      receivers: [k8s_audit]
      processors: [k8s_object_link, batch]
      exporters: [debug]
EOF
}

ROWS=() FAILED=0
run_one() { # run_one BACKEND LEVEL RATE
  local backend=$1 level=$2 rate=$3 name="$1-$2-$3"
  case $backend in memory | redis) ;; *) die "run $name: backend must be memory or redis" ;; esac
  case $level in RequestResponse) meta="" ;; Metadata) meta=-metadata-only ;; *) die "run $name: level must be RequestResponse or Metadata" ;; esac
  free_port AUDIT_PORT
  free_port METRICS_PORT
  [[ $backend == redis ]] && PREFIX="kubetrail-loadtest-$$-$RANDOM:"
  write_config "$OUT/$name.yaml" "$backend"

  "$COLLECTOR" --config "$OUT/$name.yaml" >"$OUT/$name.collector.log" 2>&1 &
  COL_PID=$!
  for _ in $(seq 100); do
    curl -fsS -o /dev/null "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$AUDIT_PORT") 2>/dev/null && break
    kill -0 "$COL_PID" 2>/dev/null || { cat "$OUT/$name.collector.log" >&2; die "run $name: the collector exited"; }
    sleep 0.1
  done

  local load cpu0 cpu1 t0 t1 peak=0 rss lg_ticks=0 lg_t
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "== $name (load average $load)"
  cpu0=$(cpu_ticks "$COL_PID")
  t0=$(date +%s.%N)
  "$OUT/loadgen" -url "http://127.0.0.1:$AUDIT_PORT/audit/loadtest" -duration "$DURATION" \
    -connections "$CONNECTIONS" -rate "$rate" $meta -summary "$OUT/$name.env" >"$OUT/$name.loadgen.txt" 2>&1 &
  LG_PID=$!
  while kill -0 "$LG_PID" 2>/dev/null; do
    rss=$(status_kib "$COL_PID" VmRSS)
    ((rss > peak)) && peak=$rss
    lg_t=$(cpu_ticks "$LG_PID")
    ((lg_t > lg_ticks)) && lg_ticks=$lg_t
    sleep 0.5
  done
  wait "$LG_PID" || echo "   loadgen exited with an error"
  LG_PID=""
  sed 's/^/   /' "$OUT/$name.loadgen.txt"
  t1=$(date +%s.%N)
  cpu1=$(cpu_ticks "$COL_PID")

  # Drain: held spans leave after owner_wait, the batch processor flushes within 200 ms.
  local accepted emitted dropped sent last=-1
  for _ in $(seq 60); do
    accepted=$(metric otelcol_receiver_accepted_spans)
    emitted=$(metric otelcol_k8s_object_link_object_spans_emitted)
    dropped=$(metric otelcol_k8s_object_link_spans_dropped)
    sent=$(metric otelcol_exporter_sent_spans)
    [[ $(metric otelcol_k8s_object_link_held_spans) == 0 && $sent == "$last" && $sent -ge $((accepted + emitted - dropped)) ]] && break
    last=$sent
    sleep 0.5
  done
  local cpu2
  cpu2=$(cpu_ticks "$COL_PID")
  local refused failed send_failed rcv_dropped held hold_full hwm keys=-
  refused=$(metric otelcol_receiver_refused_spans)
  failed=$(metric otelcol_receiver_failed_spans)
  send_failed=$(metric otelcol_exporter_send_failed_spans)
  rcv_dropped=$(metric otelcol_k8s_audit_dropped_events)
  held=$(metric otelcol_k8s_object_link_spans_held)
  hold_full=$(curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" | awk '/^otelcol_k8s_object_link_spans_released\{.*reason="hold_full"/ {s += $2} END {printf "%.0f\n", s}')
  # VmHWM is the kernel's high-water mark; it is updated lazily, so the samples may top it by a page or two.
  hwm=$(status_kib "$COL_PID" VmHWM)
  ((peak > hwm)) && hwm=$peak
  REDIS_KEYS=-
  cleanup
  keys=$REDIS_KEYS

  # shellcheck disable=SC1090
  source "$OUT/$name.env"
  local check=ok
  ((sent == accepted + emitted - dropped)) || check="MISMATCH"
  ((refused + failed + send_failed + rcv_dropped == 0)) || check="$check, LOST"
  [[ $check == ok && $LG_STATUS =~ ^200:[0-9]+$ ]] || FAILED=1
  local cores spans_s lg_cores per_event rate_txt=max
  # CPU per audit event, load and drain together: less sensitive to other work on the machine
  # than the throughput a run reaches.
  per_event=$(awk -v a="$cpu0" -v b="$cpu2" -v t="$CLK_TCK" -v n="$accepted" 'BEGIN {printf "%.0f", n ? (b - a) / t / n * 1e6 : 0}')
  cores=$(awk -v a="$cpu0" -v b="$cpu1" -v t="$CLK_TCK" -v s="$t0" -v e="$t1" 'BEGIN {printf "%.2f", (b - a) / t / (e - s)}')
  lg_cores=$(awk -v a="$lg_ticks" -v t="$CLK_TCK" -v s="$LG_ELAPSED" 'BEGIN {printf "%.2f", a / t / s}')
  spans_s=$(awk -v n="$sent" -v s="$LG_ELAPSED" 'BEGIN {printf "%.0f", n / s}')
  ((rate > 0)) && rate_txt=$rate
  ROWS+=("$(printf '| %s | %s | %s | %s | %.0f | %s | %s (%s audit + %s object) | %s | %s | %s | %s | %s | %s / %s / %s / %s | %s (%s past the bound) | %s | %s ms / %s ms |' \
    "$backend" "$level" "$rate_txt" "$load" "$LG_EVENTS_PER_S" "$LG_STATUS" "$spans_s" "$accepted" "$emitted" "$check" \
    "$cores" "$per_event" "$lg_cores" "$((hwm / 1024))" "$refused" "$failed" "$send_failed" "$dropped" "$held" "$hold_full" "$keys" "$LG_P50_MS" "$LG_P99_MS")")
  echo "   collector ${cores} cores, RSS peak $((hwm / 1024)) MiB; spans in $accepted, object spans $emitted, out $sent: $check"
}

echo "otelcol-kubetrail load test: $(nproc) cores, $DURATION per run, $CONNECTIONS connections; logs and configs in $OUT/"
for r in $RUNS; do
  IFS=: read -r backend level rate <<<"$r"
  run_one "$backend" "$level" "${rate:-0}"
done

{
echo
echo "load test of $COLLECTOR, $(date -u +%FT%TZ), $(nproc) cores, $DURATION per run, $CONNECTIONS connections"
echo "| id_map | level | rate | load avg | events/s offered | HTTP | spans/s exported (in + object) | out = in + object − dup | collector CPU (cores) | collector CPU per event (µs) | loadgen CPU (cores) | collector peak RSS (MiB) | refused / failed / send failed / dup dropped | spans held (past max_held_spans) | Redis keys | POST p50 / p99 |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/table.md"
((FAILED == 0)) || die "a run lost spans, refused requests or exported a different number of spans than it took in"
