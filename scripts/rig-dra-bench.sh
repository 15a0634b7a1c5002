#!/usr/bin/env bash
# rig-dra-bench.sh — our DRA driver measured as NVIDIA's was beside it (BENCHMARKS.md, "DRA on the
# real kubelet"): the nvidia daemon, `serve --dra`, on a copy of testdata/hosts/hgx-h100-8gpu, on
# the rig's kubelet v1.36 with the CDI-capable containerd:
#   1. the time from the daemon's start until its ResourceSlice is in the API server (polled
#      every 0.2 s), over four starts;
#   2. ten rounds of one claim of one card (class nvidia.gpustack.ai) and one busybox Pod holding
#      it, Ready, then the Pod and the claim deleted; the kubelet's own
#      dra_grpc_operations_duration_seconds for our driver's NodePrepareResources and
#      NodeUnprepareResources (mean = sum / count);
#   3. the daemon's RSS after the rounds.
#
#   scripts/rig-containerd.sh && scripts/build-release.sh && scripts/rig-dra-bench.sh
#
# Needs root and the rig (../shared/rig/build.sh). CI cannot run it.
set -u
. "$(dirname "$0")/rig-lib.sh"
dra_rig
DRA_APP=rig-dra-bench
LOG=/tmp/rig-dra-bench-serve.log
ROUNDS=${ROUNDS:-10}

WORK=$(mktemp -d /tmp/rig-dra-bench.XXXXXX)
chmod 755 "$WORK"
HOST=$WORK/hgx-h100-8gpu
cp -a "$REPO/testdata/hosts/hgx-h100-8gpu" "$HOST"
SERVE=""
stop_serve() { [ -n "$SERVE" ] && { kill "$SERVE" 2>/dev/null; wait "$SERVE" 2>/dev/null; }; SERVE=""; }
cleanup() { dra_down; }
trap cleanup EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up

PATH=$CTRD2:$PATH rig_up /tmp/rig-dra-bench
fresh_devices
$KC delete pod,resourceclaim -l app=$DRA_APP --wait=true --timeout=60s >/dev/null 2>&1
dra_classes
: >"$LOG"
start_serve() {
  RUST_LOG=${RUST_LOG:-info} "$BIN" serve --node-name rig-node --manufacturer nvidia --host-root "$HOST" \
    --kubelet-dir $K/kubelet --data-dir "$WORK/data" --dra --cdi-dir "$CDI" >>"$LOG" 2>&1 &
  SERVE=$!
}
slice() { $KC get resourceslice rig-node-nvidia.gpustack.ai -o jsonpath='{.spec.devices[*].name}' 2>/dev/null; }

# 1. start to slice, four times (the slice deleted before each start)
starts=()
for i in 1 2 3 4; do
  stop_serve
  $KC delete resourceslices --all >/dev/null 2>&1
  sleep 1
  t0=$(date +%s.%N)
  start_serve
  for _ in $(seq 1 150); do [ "$(slice | wc -w)" = 8 ] && break; sleep 0.2; done
  [ "$(slice | wc -w)" = 8 ] || fail "start $i: no slice of 8 devices"
  starts+=("$(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5)")
done
echo "daemon start to ResourceSlice (8 devices) in the API server: ${starts[*]} s"
for _ in $(seq 1 30); do [ "$(allocatable nvidia.com/gpu)" = 8 ] && break; sleep 1; done
sleep 2  # the kubelet has registered the driver again

# 2. the rounds
metric() {  # metric METHOD: "<sum> <count>" of the kubelet's measurement of our driver
  curl -sk --cert $K/pki/admin.crt --key $K/pki/admin.key https://127.0.0.1:10250/metrics 2>/dev/null |
    awk -v m="$1" '/^dra_grpc_operations_duration_seconds_(sum|count)\{/ && /nvidia.gpustack.ai/ && $0 ~ m {
      if ($0 ~ /_sum\{/) s += $2; else c += $2 } END { printf "%f %d\n", s, c }'
}
p0=$(metric NodePrepareResources); u0=$(metric NodeUnprepareResources)
ready=()
for r in $(seq 1 "$ROUNDS"); do
  claim "bench-$r" nvidia.gpustack.ai
  t0=$(date +%s.%N)
  claim_pod "bench-$r" "bench-$r"
  if running "bench-$r" 60; then
    ready+=("$(echo "$(date +%s.%N) - $t0" | bc | cut -c1-4)")
  fi
  $KC delete pod "bench-$r" --wait=true --timeout=60s >/dev/null 2>&1
  $KC delete resourceclaim "bench-$r" --wait=true --timeout=60s >/dev/null 2>&1
done
sleep 2
p1=$(metric NodePrepareResources); u1=$(metric NodeUnprepareResources)
mean() {  # mean "<sum0> <count0>" "<sum1> <count1>": the rounds' mean in ms and their count
  echo "$1 $2" | awk '{ c = $4 - $2; if (c > 0) printf "%.2f ms over %d calls", 1000 * ($3 - $1) / c, c; else print "no calls" }'
}
echo "Pods Ready after the claim's Pod was applied: ${ready[*]} s"
echo "kubelet-measured NodePrepareResources: $(mean "$p0" "$p1")"
echo "kubelet-measured NodeUnprepareResources: $(mean "$u0" "$u1")"
[ "${#ready[@]}" = "$ROUNDS" ] || fail "not every round's Pod ran"

# 3. memory
echo "daemon RSS after the rounds: $(($(ps -o rss= -p "$SERVE" 2>/dev/null || echo 0))) KiB (the device plugins, the ledger and the DRA driver in one process)"
verdict rig-dra-bench
