#!/usr/bin/env bash
# rig-allocate.sh — "Allocate on a real kubelet", checked on the rig's real kubelet (../shared/rig):
#   1. churn: N Pods one after another for each of nvidia.com/gpu, nvidia.com/gpu.shared and
#      nvidia.com/gpu.sliced (../shared/rig/churn.sh); none may be rejected;
#   2. the slice pair: a 60 % slice, then a 50 % slice — both must run, on different GPUs;
#   3. with PEER=1, NVIDIA's device plugin on the same kubelet right after, for the figures.
# The node is a copy of testdata/hosts/hgx-h100-8gpu with a stand-in preload library staged in
# its root/var/lib/gpustack/operator/lib/cuda-13/ (so slices are advertised) and at the same
# absolute path on this machine (so the kubelet's bind mount of it resolves; a static busybox
# ignores the preload).
#
#   scripts/build-release.sh
#   N=100 PEER=1 scripts/rig-allocate.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it: a person runs it and
# keeps what it printed. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
N=${N:-100}
PEER=${PEER:-0}

LIB=/var/lib/gpustack/operator/lib/cuda-13/libvgpu.so
WORK=$(mktemp -d /tmp/rig-allocate.XXXXXX)
HOST=$WORK/hgx-h100-8gpu
cp -a "$REPO/testdata/hosts/hgx-h100-8gpu" "$HOST"
mkdir -p "$HOST/root$(dirname $LIB)"
echo "stand-in preload library (rig-allocate.sh)" > "$HOST/root$LIB"
staged_here=0
if [ ! -e "$LIB" ]; then
  mkdir -p "$(dirname $LIB)"
  cp "$HOST/root$LIB" "$LIB"
  staged_here=1
fi
cleanup() {
  if [ "$staged_here" = 1 ]; then
    rm -f "$LIB"
    # and the directories staging made, once empty, up to /var/lib/gpustack
    d=$(dirname "$LIB")
    while [ "$d" != /var/lib ] && rmdir "$d" 2>/dev/null; do d=$(dirname "$d"); done
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up

for res in nvidia.com/gpu nvidia.com/gpu.shared nvidia.com/gpu.sliced; do
  echo "=== churn: $N Pods of 1 $res"
  peer=0
  # NVIDIA's plugin serves only nvidia.com/gpu: the side-by-side figure is for that resource.
  [ "$res" = nvidia.com/gpu ] && peer=$PEER
  if ! BIN=$BIN HOST=$HOST N=$N RES=$res PEER=$peer "$RIGSRC/churn.sh"; then
    failed=1
  fi
  cp /tmp/churn-serve.log "$WORK/../rig-allocate-serve-${res//\//_}.log" 2>/dev/null
done

echo "=== the slice pair: 60 %, then 50 %"
rig_up "/tmp/rig-allocate"
D=$(mktemp -d)
MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --node-name rig-node --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" \
  >/tmp/rig-allocate-pair-serve.log 2>&1 &
SERVE=$!
stop() { kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null; rig_down; cleanup; }
trap stop EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
cap() { $KC get node rig-node -o jsonpath="{.status.allocatable.nvidia\.com/gpu\.sliced\.units}" 2>/dev/null; }
for _ in $(seq 1 90); do [ -n "$(cap)" ] && [ "$(cap)" != 0 ] && break; sleep 1; done
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1
slice() { # name percentage
  local units=$(($2 * 16000))
  busybox_pod "$1" "sleep 3600" "{nvidia.com/gpu.sliced: \"1\", nvidia.com/gpu.sliced.memory-percentage: \"$2\", nvidia.com/gpu.sliced.cores-percentage: \"100\", nvidia.com/gpu.sliced.units: \"$units\"}"
  running "$1" && echo "$1 ($2 %): Running"
}
slice slice-60 60
slice slice-50 50
gpu_of() { # the accelerators the Pod's annotation records for its container c
  $KC get pod "$1" -o jsonpath='{.metadata.annotations.device\.gpustack\.ai/accelerator\.allocated}' \
    | python3 -c 'import json,sys; t=sys.stdin.read().strip(); print(json.loads(t)["c"]["accelerators"] if t else "")' 2>/dev/null
}
for _ in $(seq 1 30); do [ -n "$(gpu_of slice-50)" ] && break; sleep 1; done
a60=$(gpu_of slice-60); a50=$(gpu_of slice-50)
echo "slice-60 holds accelerators $a60; slice-50 holds $a50"
if [ -z "$a60" ] || [ -z "$a50" ] || [ "$a60" = "$a50" ]; then
  echo "the pair is not on two GPUs (or its grants were not published)"
  failed=1
fi
$KC delete pod slice-60 slice-50 --wait=true --timeout=60s >/dev/null 2>&1

verdict rig-allocate
