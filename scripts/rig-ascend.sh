#!/usr/bin/env bash
# rig-ascend.sh — Ascend (issue 27) on the rig's real kubelet and containerd (../shared/rig):
#   1. serve --manufacturer ascend on a copy of testdata/hosts/ascend-8x-910b2 (8x 910B2, V1
#      driver, physical ids 0..7; its npu-smi replayed, the container-share flags kept in the
#      copy's share-state.json), with the recorded stand-in vcann-rt build staged in the copy;
#   2. the node advertises huawei.com/npu: 8 (and .shared, .sliced) to the real kubelet;
#   3. the `ascend` RuntimeClass: the chart creates it with the Ascend Docker Runtime's handler
#      `ascend`, which this rig's containerd does not have (NODE.txt: runc only). So the script
#      creates RuntimeClass `ascend` with handler `runc` (deleted at the end; an existing one is
#      left alone): the Pods run under the class by name, and what is checked is the device
#      manager's side — the env the kubelet hands the container. Without the vendor runtime no
#      /dev/davinci<N> appears in the container; that is the runtime's job, not ours;
#   4. a Pod of 2 huawei.com/npu (runtimeClassName: ascend): ASCEND_VISIBLE_DEVICES names two
#      distinct physical ids of the host (on this host they equal the indexes 0..7; the emulator
#      tests show a host where they do not), and no flag is written;
#   5. a Pod of 1 huawei.com/npu.shared: its chip's flag is turned on with one recorded
#      `npu-smi set -t device-share … -d 1` (share-state.json shows it);
#   6. a Pod of one huawei.com/npu.sliced (25 % memory, 30 % cores): ENPU_LOG_LEVEL, ENPU_DSMI_HOOK,
#      /etc/enpu/vcann-rt/npu_info.config mounted with physical-npu-id naming the chip;
#   7. churn: N Pods of 1 huawei.com/npu one after another, none rejected.
#
#   scripts/build-release.sh && N=20 scripts/rig-ascend.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
N=${N:-20}

WORK=$(mktemp -d /tmp/rig-ascend.XXXXXX)
HOST=$WORK/ascend-8x-910b2
cp -a "$REPO/testdata/hosts/ascend-8x-910b2" "$HOST"
BUILD=/var/lib/gpustack/operator/lib/ascend/cann-8-910b
made=()   # what this script created on the machine, removed at the end
# The kubelet bind-mounts the build's files from this machine's own paths: stage stand-ins there.
for f in lib/libvruntime.so tools/enpu-monitor; do
  if [ ! -e "$BUILD/$f" ]; then
    mkdir -p "$(dirname "$BUILD/$f")"
    echo "stand-in $f (rig-ascend.sh)" > "$BUILD/$f"
    made+=("$BUILD/$f")
  fi
done

rig_up "/tmp/rig-ascend"
made_class=0
if ! $KC get runtimeclass ascend >/dev/null 2>&1; then
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: ascend}
handler: runc
EOT
  made_class=1
fi
D=$WORK/data
MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --manufacturer ascend --node-name rig-node \
  --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" >/tmp/rig-ascend-serve.log 2>&1 &
SERVE=$!
stop() {
  kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null
  $KC delete pod --all --wait=false >/dev/null 2>&1
  [ "$made_class" = 1 ] && $KC delete runtimeclass ascend >/dev/null 2>&1
  rig_down
  for m in "${made[@]}"; do rm -f "$m"; done
  rmdir "$BUILD/lib" "$BUILD/tools" "$BUILD" 2>/dev/null
  rm -rf "$WORK"
}
trap stop EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
for _ in $(seq 1 90); do [ "$(allocatable huawei.com/npu)" = 8 ] && [ -n "$(allocatable huawei.com/npu.sliced)" ] && break; sleep 1; done
echo "allocatable: huawei.com/npu $(allocatable huawei.com/npu), huawei.com/npu.shared $(allocatable huawei.com/npu.shared), huawei.com/npu.sliced $(allocatable huawei.com/npu.sliced)"
[ "$(allocatable huawei.com/npu)" = 8 ] || fail "huawei.com/npu is not 8"
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1

pod() { # name limits(yaml flow): runs it under RuntimeClass ascend, prints what its container saw
  local command
  command=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' \
    'env | grep -E "^(ASCEND_|ENPU_)" | sort; [ -e /etc/enpu/vcann-rt/npu_info.config ] && cat /etc/enpu/vcann-rt/npu_info.config; for f in /opt/enpu/vcann-rt/lib/* /opt/enpu/vcann-rt/tools/*; do [ -e $f ] && echo mounted $f; done; sleep 3600')
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  hostNetwork: true
  runtimeClassName: ascend
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: localhost/rig/busybox:1.0, imagePullPolicy: Never, command: ["sh", "-c", $command], resources: {limits: $2}}
EOT
  saw "$1"
}
EXPECT_BY=lines   # expect (rig-lib.sh) counts lines
pod ascend-exclusive '{huawei.com/npu: "2"}'
expect ascend-exclusive "ASCEND_VISIBLE_DEVICES names two of the host's physical ids (0-7)" '^ASCEND_VISIBLE_DEVICES=[0-7],[0-7]$'
ids=$($KC logs ascend-exclusive 2>/dev/null | sed -n 's/^ASCEND_VISIBLE_DEVICES=//p')
[ "${ids%,*}" != "${ids#*,}" ] && echo "  ok: two distinct chips ($ids)" || fail "ASCEND_VISIBLE_DEVICES=$ids"
echo "  pod-resources: $($K/bin/podres -brief 2>/dev/null | grep 'default/ascend-exclusive' | tr '\n' ' ')"
grep -q '"writes": 0' "$HOST/share-state.json" && echo "  ok: exclusive wrote no flag" || fail "exclusive wrote a flag"
pod ascend-shared '{huawei.com/npu.shared: "1"}'
expect ascend-shared "ASCEND_VISIBLE_DEVICES names one physical id" '^ASCEND_VISIBLE_DEVICES=[0-9]+$'
grep -q '"writes": 1' "$HOST/share-state.json" && echo "  ok: one npu-smi set -t device-share" || fail "share-state.json: $(tr -d '\n' <"$HOST/share-state.json")"
pod ascend-sliced '{huawei.com/npu.sliced: "1", huawei.com/npu.sliced.memory-percentage: "25", huawei.com/npu.sliced.cores-percentage: "30", huawei.com/npu.sliced.units: "400000"}'
expect ascend-sliced "ENPU_LOG_LEVEL=1" '^ENPU_LOG_LEVEL=1$'
expect ascend-sliced "ENPU_DSMI_HOOK=1" '^ENPU_DSMI_HOOK=1$'
expect ascend-sliced "npu_info.config: 30 % of the AI cores" '^aicore-quota=30$'
expect ascend-sliced "npu_info.config: 25 % of 65536 MiB" '^memory-quota=16384$'
expect ascend-sliced "npu_info.config names a physical id" '^physical-npu-id=[0-9]+$'
expect ascend-sliced "vcann-rt and its reader mounted" '^mounted /opt/enpu/vcann-rt/(lib/libvruntime\.so|tools/enpu-monitor)$' 2
$KC delete pod ascend-exclusive ascend-shared ascend-sliced --wait=true --timeout=60s >/dev/null 2>&1

echo "=== churn: $N Pods of 1 huawei.com/npu"
rejected=0
for i in $(seq 1 "$N"); do
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: ascend-churn-$i, namespace: default}
spec:
  hostNetwork: true
  runtimeClassName: ascend
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: localhost/rig/busybox:1.0, imagePullPolicy: Never, command: ["sleep", "3600"], resources: {limits: {huawei.com/npu: "1"}}}
EOT
  if ! $KC wait --for=condition=Ready "pod/ascend-churn-$i" --timeout=60s >/dev/null 2>&1; then
    echo "  ascend-churn-$i rejected: $($KC get pod "ascend-churn-$i" -o jsonpath='{.status.reason}: {.status.message}')"
    rejected=$((rejected + 1))
  fi
  $KC delete pod "ascend-churn-$i" --wait=true --timeout=60s >/dev/null
done
echo "huawei.com/npu: $N Pods, $rejected rejected"
[ "$rejected" = 0 ] || failed=1

[ "$failed" = 0 ] || echo "serve's log: /tmp/rig-ascend-serve.log"
verdict rig-ascend
