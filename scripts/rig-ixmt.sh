#!/usr/bin/env bash
# rig-ixmt.sh — Iluvatar's and Moore Threads' families (issue 29) on the rig's real kubelet and
# containerd (../shared/rig), one manufacturer after the other:
#   1. the RuntimeClasses `iluvatar` and `mthreads` created with handler `runc`: the rig's
#      containerd has only runc (../shared/rig/NODE.txt), and the chart's classes name the vendor
#      runtimes' handlers, which this machine does not have — with runc the Pods run and show the
#      variables their runtime would act on (the chart's `runtimeHandler` does the same);
#   2. serve --manufacturer iluvatar on a copy of testdata/hosts/iluvatar-16x-bi-v150, with a
#      stand-in libvgpu.so and ld.so.preload staged in the copy's <library-dir>/iluvatar/ and at
#      the same absolute path on this machine (so the kubelet's bind mounts resolve);
#   3. a Pod of 2 iluvatar.com/gpu (runtimeClassName iluvatar): its container has exactly
#      IX_VISIBLE_DEVICES naming two GPU- UUIDs, no /dev/iluvatar* node (no device is injected);
#   4. a Pod of one iluvatar.com/gpu.sliced (50 % memory, 25 % cores) under runtimeClassName
#      iluvatar: CUDA_DEVICE_SM_LIMIT=25, CUDA_DEVICE_MEMORY_LIMIT_0=16384m, the cache variable,
#      LIBCUDA_LOG_LEVEL=0, libvgpu.so and /tmp/vgpu mounted; the same slice without the class
#      is refused at Allocate, the kubelet's message saying why;
#   5. serve --manufacturer mthreads on a copy of testdata/hosts/mthreads-8x-s4000;
#   6. a Pod of 1 mthreads.com/gpu (runtimeClassName mthreads): exactly MTHREADS_VISIBLE_DEVICES
#      naming one UUID; a Pod of one mthreads.com/gpu.sliced (50 %, cores 8):
#      MTHREADS_QOS_MEMORY_LIMIT=25769803776, MTHREADS_QOS_COMPUTING_POWER_WEIGHT=8.
#
#   scripts/build-release.sh && scripts/rig-ixmt.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped
# and removes what it made on this machine (the staged stand-ins, /tmp/vgpulock if it made it).
set -u
. "$(dirname "$0")/rig-lib.sh"

WORK=$(mktemp -d /tmp/rig-ixmt.XXXXXX)
IXHOST=$WORK/iluvatar-16x-bi-v150
MTHOST=$WORK/mthreads-8x-s4000
cp -a "$REPO/testdata/hosts/iluvatar-16x-bi-v150" "$IXHOST"
cp -a "$REPO/testdata/hosts/mthreads-8x-s4000" "$MTHOST"
LIBDIR=/var/lib/gpustack/operator/lib/iluvatar
made=()   # what this script created on the machine, removed at the end
mkdir -p "$IXHOST/root$LIBDIR"
echo "stand-in libvgpu.so (rig-ixmt.sh)" > "$IXHOST/root$LIBDIR/libvgpu.so"
printf '/usr/local/vgpu/libvgpu.so\n' > "$IXHOST/root$LIBDIR/ld.so.preload"
for f in libvgpu.so ld.so.preload; do
  if [ ! -e "$LIBDIR/$f" ]; then
    mkdir -p "$LIBDIR"
    cp "$IXHOST/root$LIBDIR/$f" "$LIBDIR/$f"
    made+=("$LIBDIR/$f")
  fi
done
[ -e /tmp/vgpulock ] || made+=(/tmp/vgpulock)

rig_up "/tmp/rig-ixmt"
SERVE=
stop_serve() {
  [ -n "$SERVE" ] && { kill "$SERVE" 2>/dev/null; wait "$SERVE" 2>/dev/null; }
  SERVE=
  $KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1
}
stop() {
  stop_serve
  $KC delete runtimeclass iluvatar mthreads --ignore-not-found >/dev/null 2>&1
  rig_down
  for m in "${made[@]}"; do rm -rf "$m"; done
  rmdir "$LIBDIR" 2>/dev/null
  rm -rf "$WORK"
}
trap stop EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up

for class in iluvatar mthreads; do
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: $class}
handler: runc
EOT
done
echo "RuntimeClasses: $($KC get runtimeclass -o jsonpath='{range .items[*]}{.metadata.name}={.handler} {end}')"

serve() { # manufacturer host log
  MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --manufacturer "$1" --node-name rig-node \
    --host-root "$2" --kubelet-dir $K/kubelet --data-dir "$WORK/data" >"$3" 2>&1 &
  SERVE=$!
}
wait_for() { # resource count
  for _ in $(seq 1 90); do [ "$(allocatable "$1")" = "$2" ] && return 0; sleep 1; done
  fail "allocatable $1 is $(allocatable "$1"), not $2"
}
pod() { # name runtimeClass|"" limits — runs it, prints what its container saw
  local rc=""
  [ -n "$2" ] && rc="runtimeClassName: $2"
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  $rc
  containers:
  - name: c
    image: localhost/rig/busybox:1.0
    imagePullPolicy: Never
    command: ["sh", "-c", "env | grep -E '^(IX_|CUDA_|LIBCUDA_|MTHREADS_)' | sort; ls /dev | grep -cE '^(iluvatar|itrctl|mtgpu)' | sed 's/^/vendor nodes: /'; for f in /usr/local/vgpu/libvgpu.so /tmp/vgpu /etc/ld.so.preload; do [ -e \$f ] && echo mounted \$f; done; sleep 3600"]
    resources: {limits: $3}
EOT
  saw "$1"
}
EXPECT_BY=lines   # expect (rig-lib.sh) counts lines

echo "=== Iluvatar (16x BI-V150)"
serve iluvatar "$IXHOST" /tmp/rig-ixmt-serve-iluvatar.log
wait_for iluvatar.com/gpu 16
echo "allocatable: iluvatar.com/gpu $(allocatable iluvatar.com/gpu), .shared $(allocatable iluvatar.com/gpu.shared), .sliced $(allocatable iluvatar.com/gpu.sliced)"
pod ix-exclusive iluvatar '{iluvatar.com/gpu: "2"}'
expect ix-exclusive "IX_VISIBLE_DEVICES names two UUIDs" '^IX_VISIBLE_DEVICES=GPU-[0-9a-fA-F-]+,GPU-[0-9a-fA-F-]+$'
expect ix-exclusive "nothing but IX_VISIBLE_DEVICES" '^(IX_|CUDA_|LIBCUDA_|MTHREADS_)' 1
expect ix-exclusive "no vendor device node injected" '^vendor nodes: 0$'
SLICE='{iluvatar.com/gpu.sliced: "1", iluvatar.com/gpu.sliced.memory-percentage: "50", iluvatar.com/gpu.sliced.cores-percentage: "25", iluvatar.com/gpu.sliced.units: "800000"}'
pod ix-sliced iluvatar "$SLICE"
expect ix-sliced "CUDA_DEVICE_SM_LIMIT=25" '^CUDA_DEVICE_SM_LIMIT=25$'
expect ix-sliced "CUDA_DEVICE_MEMORY_LIMIT_0=16384m" '^CUDA_DEVICE_MEMORY_LIMIT_0=16384m$'
expect ix-sliced "the shared cache variable" '^CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/vgpu/cudevshr\.cache$'
expect ix-sliced "LIBCUDA_LOG_LEVEL=0" '^LIBCUDA_LOG_LEVEL=0$'
expect ix-sliced "libvgpu.so, /tmp/vgpu and /etc/ld.so.preload mounted" '^mounted ' 3
# Without the RuntimeClass the slice is refused at Allocate, saying why.
failed_before=$failed
pod ix-sliced-no-class "" "$SLICE" >/dev/null
failed=$failed_before
why=$($KC get pod ix-sliced-no-class -o jsonpath='{.status.message}' 2>/dev/null)
if echo "$why" | grep -q "must run with runtimeClassName: iluvatar"; then
  echo "  ok: a slice without runtimeClassName iluvatar is refused: $why"
else
  echo "  WRONG: the slice without its class was not refused as expected: $($KC get pod ix-sliced-no-class -o jsonpath='{.status.phase} {.status.reason}: {.status.message}')"
  failed=1
fi
stop_serve

echo "=== Moore Threads (8x S4000)"
serve mthreads "$MTHOST" /tmp/rig-ixmt-serve-mthreads.log
wait_for mthreads.com/gpu 8
echo "allocatable: mthreads.com/gpu $(allocatable mthreads.com/gpu), .shared $(allocatable mthreads.com/gpu.shared), .sliced $(allocatable mthreads.com/gpu.sliced)"
pod mt-exclusive mthreads '{mthreads.com/gpu: "1"}'
expect mt-exclusive "MTHREADS_VISIBLE_DEVICES names one UUID" '^MTHREADS_VISIBLE_DEVICES=[0-9a-f]{8}-[0-9a-f-]+$'
expect mt-exclusive "nothing but MTHREADS_VISIBLE_DEVICES" '^(IX_|CUDA_|LIBCUDA_|MTHREADS_)' 1
expect mt-exclusive "no vendor device node injected" '^vendor nodes: 0$'
pod mt-sliced mthreads '{mthreads.com/gpu.sliced: "1", mthreads.com/gpu.sliced.memory-percentage: "50", mthreads.com/gpu.sliced.cores-percentage: "8", mthreads.com/gpu.sliced.units: "800000"}'
expect mt-sliced "MTHREADS_QOS_MEMORY_LIMIT in bytes" '^MTHREADS_QOS_MEMORY_LIMIT=25769803776$'
expect mt-sliced "MTHREADS_QOS_COMPUTING_POWER_WEIGHT=8" '^MTHREADS_QOS_COMPUTING_POWER_WEIGHT=8$'
expect mt-sliced "nothing mounted" '^mounted ' 0
stop_serve

if [ "$failed" = 0 ]; then echo "rig-ixmt: OK"; else echo "rig-ixmt: FAILED (serve's logs: /tmp/rig-ixmt-serve-*.log)"; fi
exit $failed
