#!/usr/bin/env bash
# rig-amd.sh — AMD's families (issue 14) on the rig's real kubelet and containerd (../shared/rig):
#   1. serve --manufacturer amd on a copy of testdata/hosts/amd-8x-mi300x, with a stand-in
#      libvrocm.so and its two tools staged in the copy's <library-dir>/amd/ and at the same
#      absolute path on this machine (so the kubelet's bind mounts resolve);
#   2. the device nodes the responder names (/dev/kfd, /dev/dri/card<N>, /dev/dri/renderD<M>)
#      created on this machine as aliases of /dev/null (char 1:3) where absent, so containerd can
#      make them in the container — this machine has no AMD GPU; removed again at the end;
#   3. a Pod of 2 amd.com/gpu: its container sees /dev/kfd and exactly two card and two render
#      nodes, and AMD_VISIBLE_DEVICES=none;
#   4. a Pod of 1 amd.com/gpu.shared: /dev/kfd, one card, one render node;
#   5. a Pod of one amd.com/gpu.sliced (25 % memory, 25 % cores): ROCR_VISIBLE_DEVICES names one
#      GPU- id, VROCM_DEVICE_MEMORY_LIMIT_0 and HSA_CU_MASK are set, the library and its two tools are mounted;
#   5b. the same slice in a container running as uid 1000 reads /etc/ld.so.preload;
#   6. churn: N Pods of 1 amd.com/gpu one after another, none rejected;
#   7. the live usage gauges at --metrics-listen: AMD's sampler (amd-smi metric --json, the
#      recorded host's one real capture) fills device_manager_gpu_* for gpu 0's board.
#
#   scripts/build-release.sh && N=30 scripts/rig-amd.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
N=${N:-30}

WORK=$(mktemp -d /tmp/rig-amd.XXXXXX)
HOST=$WORK/amd-8x-mi300x
cp -a "$REPO/testdata/hosts/amd-8x-mi300x" "$HOST"
LIBDIR=/var/lib/gpustack/operator/lib/amd
made=()   # what this script created on the machine, removed at the end
for f in libvrocm.so rocm-monitor rocm-cumask-check; do
  mkdir -p "$HOST/root$LIBDIR"
  echo "stand-in $f (rig-amd.sh)" > "$HOST/root$LIBDIR/$f"
  if [ ! -e "$LIBDIR/$f" ]; then
    mkdir -p "$LIBDIR"
    cp "$HOST/root$LIBDIR/$f" "$LIBDIR/$f"
    made+=("$LIBDIR/$f")
  fi
done
mkdir -p /dev/dri
for n in /dev/kfd $(cd "$HOST/root" && ls -d dev/dri/card* dev/dri/renderD* | sed 's#^#/#'); do
  if [ ! -e "$n" ]; then
    mknod -m 0666 "$n" c 1 3
    made+=("$n")
  fi
done

rig_up "/tmp/rig-amd"
D=$WORK/data
MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --manufacturer amd --node-name rig-node \
  --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" \
  --metrics-listen 127.0.0.1:9482 --monitor-period 1s >/tmp/rig-amd-serve.log 2>&1 &
SERVE=$!
stop() {
  kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null
  $KC delete pod --all --wait=false >/dev/null 2>&1
  rig_down
  for m in "${made[@]}"; do rm -f "$m"; done
  rmdir /dev/dri "$LIBDIR" 2>/dev/null
  rm -rf "$WORK"
}
trap stop EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
alloc() { $KC get node rig-node -o jsonpath="{.status.allocatable.${1//./\\.}}" 2>/dev/null; }
for _ in $(seq 1 90); do [ "$(alloc amd.com/gpu)" = 8 ] && [ -n "$(alloc amd.com/gpu.sliced)" ] && break; sleep 1; done
echo "allocatable: amd.com/gpu $(alloc amd.com/gpu), amd.com/gpu.shared $(alloc amd.com/gpu.shared), amd.com/gpu.sliced $(alloc amd.com/gpu.sliced)"
[ "$(alloc amd.com/gpu)" = 8 ] || failed=1
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1

pod() { # name limits(yaml flow) -> runs it, prints what its container saw
  busybox_pod "$1" 'ls /dev/kfd /dev/dri/ | tr "\n" " "; echo; env | grep -E "^(AMD_|ROCR_|HSA_|VROCM_|LIBVROCM_)" | sort; for f in /usr/local/vrocm/*; do [ -e $f ] && echo mounted $f; done; sleep 3600' "$2"
  saw "$1"
}

pod amd-exclusive '{amd.com/gpu: "2"}'
expect amd-exclusive "/dev/kfd" '^/dev/kfd'
expect amd-exclusive "two card nodes" 'card[0-9]+' 2
expect amd-exclusive "two render nodes" 'renderD[0-9]+' 2
expect amd-exclusive "AMD_VISIBLE_DEVICES=none" '^AMD_VISIBLE_DEVICES=none$'
pod amd-shared '{amd.com/gpu.shared: "1"}'
expect amd-shared "/dev/kfd" '^/dev/kfd'
expect amd-shared "one card node" 'card[0-9]+' 1
expect amd-shared "one render node" 'renderD[0-9]+' 1
pod amd-sliced '{amd.com/gpu.sliced: "1", amd.com/gpu.sliced.memory-percentage: "25", amd.com/gpu.sliced.cores-percentage: "25", amd.com/gpu.sliced.units: "400000"}'
expect amd-sliced "ROCR_VISIBLE_DEVICES names one GPU- id" '^ROCR_VISIBLE_DEVICES=GPU-[0-9a-fA-F-]+$'
expect amd-sliced "VROCM_DEVICE_MEMORY_LIMIT_0" '^VROCM_DEVICE_MEMORY_LIMIT_0=[0-9]+$'
expect amd-sliced "HSA_CU_MASK" '^HSA_CU_MASK=0:[0-9]+-[0-9]+$'
expect amd-sliced "the library and its two tools mounted" '^mounted /usr/local/vrocm/(libvrocm\.so|rocm-monitor|rocm-cumask-check)$' 3
# A sliced container running as a non-root user must still read the preload file: the loader
# skips one it cannot read, and the slice would run without its library.
cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: amd-sliced-nonroot, namespace: default}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  securityContext: {runAsUser: 1000, runAsGroup: 1000}
  containers:
  - {name: c, image: localhost/rig/busybox:1.0, imagePullPolicy: Never, command: ["sh", "-c", "id -u; cat /etc/ld.so.preload; sleep 3600"], resources: {limits: {amd.com/gpu.sliced: "1", amd.com/gpu.sliced.memory-percentage: "25", amd.com/gpu.sliced.cores-percentage: "25", amd.com/gpu.sliced.units: "400000"}}}
EOT
if running amd-sliced-nonroot; then
  sleep 1
  echo "amd-sliced-nonroot: Running; its container printed:"
  $KC logs amd-sliced-nonroot 2>/dev/null | sed 's/^/    /'
fi
expect amd-sliced-nonroot "uid 1000 reads /etc/ld.so.preload naming the library" '^/usr/local/vrocm/libvrocm\.so$'
$KC delete pod amd-exclusive amd-shared amd-sliced amd-sliced-nonroot --wait=true --timeout=60s >/dev/null 2>&1

echo "=== churn: $N Pods of 1 amd.com/gpu"
rejected=0
for i in $(seq 1 "$N"); do
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: amd-churn-$i, namespace: default}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: localhost/rig/busybox:1.0, imagePullPolicy: Never, command: ["sleep", "3600"], resources: {limits: {amd.com/gpu: "1"}}}
EOT
  if ! $KC wait --for=condition=Ready "pod/amd-churn-$i" --timeout=60s >/dev/null 2>&1; then
    echo "  amd-churn-$i rejected: $($KC get pod "amd-churn-$i" -o jsonpath='{.status.reason}: {.status.message}')"
    rejected=$((rejected + 1))
  fi
  $KC delete pod "amd-churn-$i" --wait=true --timeout=60s >/dev/null
done
echo "amd.com/gpu: $N Pods, $rejected rejected"
[ "$rejected" = 0 ] || failed=1

echo "=== live usage gauges (http://127.0.0.1:9482/metrics)"
gauges=$(curl -s http://127.0.0.1:9482/metrics | grep -E '^device_manager_gpu_(utilization_percent|memory_(used|total)_mib)\{')
echo "$gauges" | sed 's/^/    /'
if echo "$gauges" | grep -qE '^device_manager_gpu_memory_total_mib\{uuid="GPU-[0-9a-f]{16}"\} 46064(\.0)?$'; then
  echo "  ok: AMD's board has its memory gauge"
else
  echo "  WRONG: no AMD memory gauge"; failed=1
fi

if [ "$failed" = 0 ]; then echo "rig-amd: OK"; else echo "rig-amd: FAILED (serve's log: /tmp/rig-amd-serve.log)"; fi
exit $failed
