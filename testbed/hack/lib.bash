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
