# Shared by the testbed scripts (sourced; each defines die first).

# free_port VAR: sets VAR to a free TCP port on 127.0.0.1, below the ephemeral range so that no
# outgoing connection takes it between the probe and the bind (seen with several testbeds
# running). Probing by connect is racy in theory; each port is also excluded from later picks in
# this run (set in this shell, not a subshell, so TAKEN persists).
declare -A TAKEN=()
read -r EPH_LOW _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || EPH_LOW=32768
if ((EPH_LOW > 12000)); then PORT_LO=10000 PORT_N=$((EPH_LOW - 10000)); else PORT_LO=20000 PORT_N=40000; fi
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((PORT_LO + (RANDOM * 32768 + RANDOM) % PORT_N))
    [[ -n ${TAKEN[$p]:-} ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      TAKEN[$p]=1
      printf -v "$1" '%s' "$p"
      return
    fi
  done
  die "no free port on 127.0.0.1"
}

# default_capture: the benchmarks' input when CAPTURE is unset: the recorded webhook capture
# testbed/fixtures/audit-webhook-demo.jsonl.gz if present, else every recorded scenario.
default_capture() {
  if [[ -f testbed/fixtures/audit-webhook-demo.jsonl.gz ]]; then
    echo testbed/fixtures/audit-webhook-demo.jsonl.gz
  else
    find testbed/fixtures -mindepth 2 -maxdepth 2 -type d -name audit-webhook -printf '%h\n' | sort | paste -sd, -
  fi
}

# metric_sum NAME DIVISOR [ABSENT]: the sum of every series of the Prometheus metric NAME on stdin
# (its labels aside, so a gauge of several instances adds up), divided by DIVISOR; ABSENT ("-" if
# not given) when there is none. Whole numbers when DIVISOR is 1, else one decimal.
metric_sum() {
  awk -v name="$1" -v div="$2" -v absent="${3:--}" '
    { split($1, f, "{") } f[1] == name { s += $NF; n++ }
    END { if (!n) print absent; else if (div == 1) printf "%.0f\n", s; else printf "%.1f\n", s / div }'
}

# sample_loop PID FILE METRICS_PORT [PPROF_PORT [LABEL]]: every SAMPLE seconds while PID lives, one
# row into FILE and on stdout (there after LABEL, which tells concurrent samplers apart): seconds
# since start, RSS (MiB, VmRSS), Go heap in use (MiB, the collector's
# otelcol_process_runtime_heap_alloc_bytes), goroutines (the pprof extension's count; "-" without
# it), open file descriptors, then where the RSS is: anonymous memory (RssAnon), pages of mapped
# files such as the binary's code (RssFile), and what the Go runtime holds from the OS (MiB,
# otelcol_process_runtime_total_sys_memory_bytes), then what the bounded caches say they hold,
# from their own metrics ("-" in a process without them): the diff cache (MiB it charges, objects;
# diff_cache_max_bytes), the redelivery set of the k8s_audit connector (MiB it charges;
# dedup_max_bytes), the ID map (MiB and records it charges, marks; id_map.memory). Each is the
# component's estimate, summed over its instances. `make soak` (bench-audit.sh, bench-kafka.sh).
sample_loop() {
  local pid=$1 file=$2 metrics=$3 pprof=${4:-} label=${5:-} t0=$SECONDS
  : >"$file"
  printf '   %s%8s %9s %9s %11s %5s %9s %9s %9s %10s %8s %10s %10s %8s %8s\n' "${label:+$label }" seconds "RSS MiB" "heap MiB" goroutines fds "anon MiB" "file MiB" "Go sys" \
    "diff MiB" objects "dedup MiB" "idmap MiB" records marks
  while kill -0 "$pid" 2>/dev/null; do
    sleep "$SAMPLE"
    kill -0 "$pid" 2>/dev/null || break
    local rss heap gor fds anon filemap sys m diff objs dedup idmap recs marks
    rss=$(awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")
    anon=$(awk '/^RssAnon:/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")
    filemap=$(awk '/^RssFile:/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")
    m=$(curl -fsS "http://127.0.0.1:$metrics/metrics" 2>/dev/null || true)
    heap=$(awk '/^otelcol_process_runtime_heap_alloc_bytes/ { printf "%.1f", $NF / 1048576; exit }' <<<"$m")
    sys=$(awk '/^otelcol_process_runtime_total_sys_memory_bytes/ { printf "%.1f", $NF / 1048576; exit }' <<<"$m")
    diff=$(metric_sum otelcol_k8s_audit_diff_cache_bytes 1048576 <<<"$m")
    objs=$(metric_sum otelcol_k8s_audit_diff_cache_objects 1 <<<"$m")
    dedup=$(metric_sum otelcol_k8s_audit_dedup_bytes 1048576 <<<"$m")
    idmap=$(metric_sum otelcol_k8s_object_link_id_map_bytes 1048576 <<<"$m")
    recs=$(metric_sum otelcol_k8s_object_link_id_map_records 1 <<<"$m")
    marks=$(metric_sum otelcol_k8s_object_link_id_map_marks 1 <<<"$m")
    gor=-
    [[ -n $pprof ]] && gor=$(curl -fsS "http://127.0.0.1:$pprof/debug/pprof/goroutine?debug=1" 2>/dev/null | sed -n '1s/.*total \([0-9]*\).*/\1/p')
    fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$((SECONDS - t0))" "$rss" "${heap:--}" "${gor:--}" "$fds" "$anon" "$filemap" "${sys:--}" \
      "$diff" "$objs" "$dedup" "$idmap" "$recs" "$marks" >>"$file"
    printf '   %s%8s %9s %9s %11s %5s %9s %9s %9s %10s %8s %10s %10s %8s %8s\n' "${label:+$label }" "$((SECONDS - t0))" "$rss" "${heap:--}" "${gor:--}" "$fds" "$anon" "$filemap" "${sys:--}" \
      "$diff" "$objs" "$dedup" "$idmap" "$recs" "$marks"
  done
}

# sample_summary FILE [WHAT]: the RSS slope (least squares, MiB per minute) over the samples from
# SAMPLE_FROM seconds on, and the last sample's RSS against the first of them.
sample_summary() {
  awk -F'\t' -v from="$SAMPLE_FROM" -v what="${2:-}" '
    $1 >= from { n++; x[n] = $1 / 60; y[n] = $2; sx += x[n]; sy += y[n] }
    END {
      if (n < 2) { print "   soak" what ": fewer than two samples after " from " s: no slope"; exit }
      mx = sx / n; my = sy / n
      for (i = 1; i <= n; i++) { num += (x[i] - mx) * (y[i] - my); den += (x[i] - mx) ^ 2 }
      printf "   soak%s: RSS slope %+.2f MiB/min over %d samples from %d s; last %.1f MiB, %+.1f%% of %.1f MiB at %d s\n",
        what, num / den, n, from, y[n], (y[n] - y[1]) / y[1] * 100, y[1], x[1] * 60
    }' "$1"
}
