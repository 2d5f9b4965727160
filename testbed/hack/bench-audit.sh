#!/usr/bin/env bash
# `make bench-audit`: what the collector spends per audit event on the webhook path, measured the
# same way for one or two collector binaries in one run. For each workload (and each binary), start
# the collector on a generated config (k8s_audit on a loopback port -> k8s_object_link (memory ID
# map, defaults) -> batch -> otlp_grpc without compression), and let testbed/cmd/benchaudit replay
# the capture into it N passes, open loop on one keep-alive connection, with its own OTLP gRPC sink
# counting what arrives. One table row per run: µs of collector CPU per posted event (utime +
# stime from /proc, first request to last span), events/s, bytes allocated per event (the
# collector's otelcol_process_runtime_total_alloc_bytes; allocation counts are not exposed), peak
# RSS (VmHWM), audit spans expected / arrived / lost, object spans emitted / arrived / lost.
#
#   testbed/hack/bench-audit.sh                          # bin/otelcol-kubetrail, both workloads
#   BASELINE=main testbed/hack/bench-audit.sh            # and the collector built from main, same input
#   BENCH_EVENTS=20000 WORKLOADS=replay testbed/hack/bench-audit.sh
#
# Environment:
#   CAPTURE      comma-separated scenario directories or .jsonl[.gz] captures (one EventList a line);
#                default testbed/fixtures/audit-webhook-demo.jsonl.gz if present, else every
#                recorded scenario under testbed/fixtures
#   BENCH_EVENTS events per run (default 250000, about a minute of one run on 2 cores); PASSES
#                instead sets the passes directly
#   WORKLOADS    "replay fresh" (default): replay = same objects each pass, only auditIDs rewritten
#                (same byte length); fresh = new UIDs and names each pass (new object spans)
#   REPEAT       runs per binary and workload (default 1; use 3 and take the median for figures to quote)
#   BASELINE     a git revision: its collector is built with ocb from a temporary git worktree
#                (cached in $KUBETRAIL_CACHE/bench-audit/) and measured before the current one, run
#                for run on the same input; the table ends with current / baseline per workload
#                (medians of the REPEAT runs) for CPU per event, bytes allocated per event, peak RSS
#   OCB          the ocb that builds the baseline (default: v0.165.0, make build's); a revision
#                before collector v0.165 (43834b2 and older) needs the ocb of its builder-config.yaml
#   COLLECTOR    the current collector (default bin/otelcol-kubetrail; `make bench-audit` builds it)
#   PROFILE      1: take a CPU profile (PROFILE_SECONDS, default 10), a heap profile HEAP_AT seconds in
#                (default 3) and a heap-allocation profile at the end of each collector that has the
#                pprof extension, and print where its CPU goes (build/bench-audit/<run>.cpu.pprof,
#                .heap.pprof, .allocs.pprof; go tool pprof reads them)
#   BATCH        events per webhook body (benchaudit -batch): the capture's events regrouped in order,
#                as an apiserver under load fills its batches (up to 400), never across passes; 0
#                (default): the recorded bodies
#   RATE         events per second to send at (default: open loop, as fast as the collector reads);
#                peak RSS at a cluster's pace rather than at the collector's full speed
#   BENCH_BATCH  processor (default: the batch processor), exporter (the exporter's sending_queue
#                batching with its defaults, in memory) or shipped (the otlp_grpc exporter of
#                distribution/kubernetes/kubetrail.yaml: sending_queue batching 512 KiB-3 MiB, 4
#                consumers, 1,000 requests, refusing when full, behind its persistent queue, a
#                file_storage bbolt file under build/bench-audit/queue written with fsync)
#   COMPRESSION  the otlp_grpc exporter's compression: none (default: the figures here measure the
#                collector's work, not the export's), gzip (the exporter's default, what a collector
#                configured without the key spends), zstd or snappy
#   BENCH_FSYNC  with BENCH_BATCH=shipped: false turns the queue's fsync off (default true, as shipped)
#   KELEMETRY    the binary of Kelemetry (github.com/kubewharf/kelemetry, built from its source at a
#                tag: docs/performance.md, "Against Kelemetry"): run for run after the kubetrail
#                collectors on the same input, its audit path in one process as its chart's consumer
#                runs it (webhook, local queue, consumer, local span cache, OTLP gRPC to the same sink,
#                log level info), without its diffs and owner links (they watch the objects, and the
#                capture's are in no apiserver; kubetrail's spans carry both); its spans counted as
#                they arrive, none expected by ID; the table ends with kubetrail / Kelemetry per
#                workload
#   KELEMETRY_KUBECONFIG  the kubeconfig of an apiserver Kelemetry asks (default
#                testbed/.state/kubeconfig: `make cluster-up`): it resolves a generateName create's
#                resource by discovery and reads objects for its object spans' tags, and without an
#                apiserver it waits on both
#   SAMPLE       seconds: while the load runs, every SAMPLE seconds print the collector's RSS, Go heap,
#                goroutines and open file descriptors, and at the end the RSS slope and the last
#                sample against the one at SAMPLE_FROM seconds (default 120): `make soak` (a steady
#                RATE for SOAK_MINUTES) is this with one binary and workload
# Everything it starts is stopped by PID; logs and configs in build/bench-audit/.
set -euo pipefail
cd "$(dirname "$0")/../.."

# As the Makefile builds: -trimpath also lets the baseline build reuse the build cache.
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=${GOFLAGS:--trimpath}
OUT=build/bench-audit
CACHE=${KUBETRAIL_CACHE:-$HOME/.cache/kubetrail}
OCB=${OCB:-$CACHE/bin/ocb-v0.165.0/builder}
COLLECTOR=${COLLECTOR:-bin/otelcol-kubetrail}
WORKLOADS=${WORKLOADS:-replay fresh}
REPEAT=${REPEAT:-1}
BENCH_EVENTS=${BENCH_EVENTS:-250000}
BENCH_BATCH=${BENCH_BATCH:-processor}
COMPRESSION=${COMPRESSION:-none}
case $COMPRESSION in none | gzip | zstd | snappy) ;; *) echo "bench-audit: COMPRESSION=$COMPRESSION: want none, gzip, zstd or snappy" >&2; exit 2 ;; esac
PROFILE=${PROFILE:-0}
PROFILE_SECONDS=${PROFILE_SECONDS:-10}
SAMPLE=${SAMPLE:-}
BATCH=${BATCH:-0}
SAMPLE_FROM=${SAMPLE_FROM:-120}

die() { echo "bench-audit: $*" >&2; exit 1; }
# shellcheck source=testbed/hack/lib.bash
source testbed/hack/lib.bash
CAPTURE=${CAPTURE:-$(default_capture)}
[[ -x $COLLECTOR ]] || die "$COLLECTOR is missing: run make build first"
[[ $BATCH =~ ^[0-9]+$ ]] || die "BATCH=$BATCH: want 0 or a number of events"
case $BENCH_BATCH in
  processor | exporter) PIPELINE="batching in the $BENCH_BATCH" ;;
  shipped) PIPELINE="the shipped exporter (persistent queue, fsync ${BENCH_FSYNC:-true})" ;;
  *) die "BENCH_BATCH must be processor, exporter or shipped" ;;
esac
mkdir -p "$OUT" "$CACHE/bench-audit"
go build -o "$OUT/benchaudit" ./testbed/cmd/benchaudit

COL_PID="" WORKTREE="" SAMPLER_PID=""
cleanup() {
  if [[ -n $SAMPLER_PID ]]; then
    kill "$SAMPLER_PID" 2>/dev/null || true
    wait "$SAMPLER_PID" 2>/dev/null || true
    SAMPLER_PID=""
  fi
  if [[ -n $COL_PID ]]; then
    kill "$COL_PID" 2>/dev/null || true
    wait "$COL_PID" 2>/dev/null || true
    COL_PID=""
  fi
  if [[ -n $WORKTREE ]]; then
    git worktree remove --force "$WORKTREE" 2>/dev/null || true
    rm -rf "$(dirname "$WORKTREE")"
    WORKTREE=""
  fi
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The baseline collector: ocb on the revision's own builder-config.yaml (its replace of the root
# module points at the worktree), once per revision.
BINARIES=()
LABELS=()
if [[ -n ${BASELINE:-} ]]; then
  rev=$(git rev-parse --verify "${BASELINE}^{commit}") || die "BASELINE=$BASELINE is not a revision"
  base_bin=$CACHE/bench-audit/otelcol-kubetrail-$rev
  if [[ ! -x $base_bin ]]; then
    [[ -x $OCB ]] || die "ocb is missing at $OCB (make build installs it)"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/kubetrail-baseline.XXXXXX")
    WORKTREE=$tmp/src
    git worktree add --quiet --detach "$WORKTREE" "$rev"
    echo "building the baseline collector of $BASELINE (${rev:0:12}) in $WORKTREE"
    mkdir -p "$WORKTREE/build"
    (cd "$WORKTREE" && "$OCB" --config builder-config.yaml >"$OLDPWD/$OUT/baseline-build.log" 2>&1) ||
      { tail -20 "$OUT/baseline-build.log" >&2; die "the baseline build failed (log: $OUT/baseline-build.log)"; }
    cp "$WORKTREE/build/otelcol-kubetrail/otelcol-kubetrail" "$base_bin.tmp" && mv -f "$base_bin.tmp" "$base_bin"
    cleanup
  fi
  BINARIES+=("$base_bin")
  LABELS+=("baseline ($BASELINE ${rev:0:8})")
fi
BINARIES+=("$COLLECTOR")
LABELS+=("current ($(git describe --always --dirty 2>/dev/null || echo worktree))")
if [[ -n ${KELEMETRY:-} ]]; then
  [[ -x $KELEMETRY ]] || die "KELEMETRY=$KELEMETRY is not an executable"
  [[ -z $SAMPLE && $PROFILE == 0 && $BENCH_BATCH == processor ]] || die "KELEMETRY measures CPU, RSS and spans only: no SAMPLE, PROFILE or BENCH_BATCH"
  KELEMETRY_KUBECONFIG=${KELEMETRY_KUBECONFIG:-testbed/.state/kubeconfig}
  [[ -r $KELEMETRY_KUBECONFIG ]] || die "KELEMETRY_KUBECONFIG=$KELEMETRY_KUBECONFIG: no kubeconfig (make cluster-up writes testbed/.state/kubeconfig)"
  BINARIES+=("$KELEMETRY")
  LABELS+=("kelemetry")
fi


write_config() { # write_config FILE PPROF_PORT (empty: no profiling)
  local processors="[k8s_object_link, batch]" batch="  batch: {}" queue="" ext="" service_ext=""
  if [[ -n ${2:-} ]]; then
    ext="extensions:
  pprof: {endpoint: 127.0.0.1:$2}"
    service_ext="  extensions: [pprof]"
  fi
  if [[ $BENCH_BATCH == exporter ]]; then
    processors="[k8s_object_link]" batch=""
    queue="    sending_queue: {batch: {flush_timeout: 200ms}}"
  fi
  if [[ $BENCH_BATCH == shipped ]]; then
    # The exporter of distribution/kubernetes/kubetrail.yaml, its queue on a fresh bbolt file.
    processors="[k8s_object_link]" batch=""
    rm -rf "$OUT/queue"
    ext="${ext:-extensions:}
  file_storage/queue: {directory: $OUT/queue, create_directory: true, fsync: ${BENCH_FSYNC:-true}}"
    service_ext="  extensions: [${2:+pprof, }file_storage/queue]"
    queue="    sending_queue: {storage: file_storage/queue, sizer: requests, queue_size: 1000, block_on_overflow: false, num_consumers: 4,
      batch: {flush_timeout: 2s, sizer: bytes, min_size: 524288, max_size: 3145728}}"
  fi
  cat >"$1" <<EOF
$ext
receivers:
  k8s_audit:
    endpoint: 127.0.0.1:$AUDIT_PORT
    cluster: bench
processors:
  k8s_object_link: {}
$batch
exporters:
  otlp_grpc:
    endpoint: 127.0.0.1:$SINK_PORT
    tls: {insecure: true}
    compression: $COMPRESSION
$queue
service:
$service_ext
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
      processors: $processors
      exporters: [otlp_grpc]
EOF
}

ROWS=$OUT/rows.tsv
: >"$ROWS"
FAILED=0
run_one() { # run_one LABEL BINARY WORKLOAD N
  local label=$1 bin=$2 workload=$3 name
  name="$workload-$4-$(basename "$bin")"
  free_port AUDIT_PORT
  free_port METRICS_PORT
  free_port SINK_PORT
  PPROF_PORT=""
  local tracer=(-metrics "http://127.0.0.1:$METRICS_PORT/metrics")
  if [[ $label == kelemetry ]]; then
    # The capture's objects are not in that apiserver: Kelemetry's reads of them find nothing.
    "$bin" --audit-webhook-enable --audit-producer-enable --audit-consumer-enable --mq=local --span-cache=local \
      --http-address=127.0.0.1 --http-port="$AUDIT_PORT" --metrics=noop --log-level=info --klog-v=0 \
      --tracer-otel-endpoint="127.0.0.1:$SINK_PORT" --tracer-otel-insecure \
      --kube-target-cluster=bench --kube-config-paths="bench=$KELEMETRY_KUBECONFIG" >"$OUT/$name.collector.log" 2>&1 &
    # Its OpenTelemetry SDK exports every 5 s: drained once nothing arrived for longer.
    tracer=(-foreign -quiet 8s)
  else
    if [[ $PROFILE == 1 || -n $SAMPLE ]] && "$bin" components 2>/dev/null | grep -q 'name: pprof$'; then free_port PPROF_PORT; fi
    write_config "$OUT/$name.yaml" "$PPROF_PORT"
    "$bin" --config "$OUT/$name.yaml" >"$OUT/$name.collector.log" 2>&1 &
  fi
  COL_PID=$!
  for _ in $(seq 150); do
    if [[ $label == kelemetry ]]; then
      (exec 3<>"/dev/tcp/127.0.0.1/$AUDIT_PORT") 2>/dev/null && break
    else
      curl -fsS -o /dev/null "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$AUDIT_PORT") 2>/dev/null && break
    fi
    kill -0 "$COL_PID" 2>/dev/null || { cat "$OUT/$name.collector.log" >&2; die "$label: the collector exited"; }
    sleep 0.1
  done
  echo "== $label, $workload (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  local size=(-events "$BENCH_EVENTS")
  [[ -n ${PASSES:-} ]] && size=(-passes "$PASSES")
  local prof_pid=""
  if [[ -n $SAMPLE ]]; then
    sample_loop "$COL_PID" "$OUT/$name.samples.tsv" "$METRICS_PORT" "$PPROF_PORT" &
    SAMPLER_PID=$!
  fi
  if [[ $PROFILE == 1 && -n $PPROF_PORT ]]; then
    # One second in, the webhook is at full speed; the allocation profile is taken at the end.
    (sleep 1 && curl -fsS -o "$OUT/$name.cpu.pprof" "http://127.0.0.1:$PPROF_PORT/debug/pprof/profile?seconds=$PROFILE_SECONDS") &
    prof_pid=$!
    # What the heap holds while the webhook runs at full speed (inuse_space), HEAP_AT seconds in.
    (sleep "${HEAP_AT:-3}"; curl -fsS -o "$OUT/$name.heap.pprof" "http://127.0.0.1:$PPROF_PORT/debug/pprof/heap") &
  fi
  "$OUT/benchaudit" -url "http://127.0.0.1:$AUDIT_PORT/audit/bench" -sink "127.0.0.1:$SINK_PORT" -pid "$COL_PID" \
    "${tracer[@]}" -capture "$CAPTURE" "${size[@]}" -workload "$workload" \
    -label "$label" -row "$ROWS" -clk-tck "$(getconf CLK_TCK)" -rate "${RATE:-0}" -batch "$BATCH" | sed 's/^/   /' || { echo "   benchaudit failed"; FAILED=1; }
  if [[ -n $SAMPLER_PID ]]; then
    kill "$SAMPLER_PID" 2>/dev/null || true
    wait "$SAMPLER_PID" 2>/dev/null || true
    SAMPLER_PID=""
    sample_summary "$OUT/$name.samples.tsv"
  fi
  if [[ -n $prof_pid ]]; then
    wait "$prof_pid" || echo "   the CPU profile failed (a run shorter than PROFILE_SECONDS + 1 s?)"
    curl -fsS -o "$OUT/$name.allocs.pprof" "http://127.0.0.1:$PPROF_PORT/debug/pprof/allocs" || true
    if [[ -s $OUT/$name.cpu.pprof ]]; then
      echo "   where the collector's CPU went ($OUT/$name.cpu.pprof, cumulative, top functions):"
      go tool pprof -top -cum -nodecount=40 "$OUT/$name.cpu.pprof" 2>/dev/null | sed -n '6,46p' | sed 's/^/     /'
    fi
  fi
  kill "$COL_PID" 2>/dev/null || true
  wait "$COL_PID" 2>/dev/null || true
  COL_PID=""
}

echo "bench-audit: $(nproc) cores, capture $CAPTURE, ${PASSES:+$PASSES passes}${PASSES:-$BENCH_EVENTS events} per run, $PIPELINE, export compression $COMPRESSION"
for workload in $WORKLOADS; do
  for n in $(seq "$REPEAT"); do
    for i in "${!BINARIES[@]}"; do
      run_one "${LABELS[$i]}" "${BINARIES[$i]}" "$workload" "$n"
    done
  done
done

{
  echo
  echo "bench-audit, $(date -u +%FT%TZ), $(nproc) cores, capture $CAPTURE, $PIPELINE"
  echo "| collector | workload | passes | events posted | MiB posted | CPU µs per posted event | events/s | drained (s) | bytes allocated per event | peak RSS (MiB) | audit spans expected / arrived / lost | object spans emitted / arrived / lost | duplicates | HTTP answers |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  awk -F'\t' '{ line = "|"; for (i = 1; i <= NF; i++) line = line " " $i " |"; print line }' "$ROWS"
} | tee "$OUT/table.md"
if [[ -n ${BASELINE:-} || -n ${KELEMETRY:-} ]]; then
  # Current over baseline (the cost of a change) and over Kelemetry, per workload, of the medians of
  # the REPEAT runs.
  echo
  echo "current / baseline, current / kelemetry (medians of $REPEAT run(s) each; below 1 is better):"
  awk -F'\t' '
    function median(list,   n, v, i, j, t) {
      n = split(list, v, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    {
      side = ($1 ~ /^baseline/) ? "b" : ($1 == "kelemetry") ? "k" : "c"
      key = side SUBSEP $2
      cpu[key] = cpu[key] " " $6; alloc[key] = alloc[key] " " $9; rss[key] = rss[key] " " $10
      if (side == "k") { split($11, a, " / "); spans[key] = spans[key] " " (a[2] + 0) / $4 }
      workloads[$2] = 1
    }
    END {
      for (w in workloads) {
        b = "b" SUBSEP w; c = "c" SUBSEP w; k = "k" SUBSEP w
        if ((b in cpu) && (c in cpu))
          printf "  %-7s CPU per event %.2f× (%s → %s µs), bytes allocated per event %.2f× (%s → %s), peak RSS %.2f× (%s → %s MiB)\n", w,
            median(cpu[c]) / median(cpu[b]), median(cpu[b]), median(cpu[c]),
            median(alloc[c]) / median(alloc[b]), median(alloc[b]), median(alloc[c]),
            median(rss[c]) / median(rss[b]), median(rss[b]), median(rss[c])
        if ((k in cpu) && (c in cpu))
          printf "  %-7s against Kelemetry: CPU per event %.2f× (%s µs, Kelemetry %s), peak RSS %.2f× (%s MiB, Kelemetry %s); Kelemetry sent %.2f spans per posted event\n", w,
            median(cpu[c]) / median(cpu[k]), median(cpu[c]), median(cpu[k]),
            median(rss[c]) / median(rss[k]), median(rss[c]), median(rss[k]), median(spans[k])
      }
    }' "$ROWS" | tee -a "$OUT/table.md"
fi
((FAILED == 0)) || die "a run failed"
awk -F'\t' '$1 != "kelemetry" { split($11, a, " / "); if (a[3] != 0) bad = 1 } END { exit bad }' "$ROWS" || die "a run lost audit spans"
