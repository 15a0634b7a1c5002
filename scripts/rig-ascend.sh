#!/usr/bin/env bash
# rig-ascend.sh [HOST] — Ascend (issues 27, 45) on the rig's real kubelet and containerd
# (../shared/rig), on a copy of the recorded host HOST (default ascend-8x-910b2):
#   ascend-8x-910b2          8x 910B2, V1 driver, physical ids 0..7, a container-share flag each
#                            (kept in the copy's share-state.json), vcann-rt cann-8-910b;
#   ascend-950-server-16p    16x 950PR on an A+K mainboard (0x23) whose spod-info says Super Pod
#                            Type 3 (a 16P server), V2 (logic ids 0..15, no share flag), cann-9-950;
#   ascend-a3-server40-spod  server 40 of a 384-NPU A3 super-pod, 16 dies, V1, cann-8-910c.
#   1. serve --manufacturer ascend on the copy (its npu-smi replayed), the recorded stand-in
#      vcann-rt build for the host's family staged on this machine;
#   2. the node advertises huawei.com/npu: <NPUs> (and .shared, .sliced) to the real kubelet;
#   3. the `ascend` RuntimeClass: the chart creates it with the Ascend Docker Runtime's handler
#      `ascend`, which this rig's containerd does not have (NODE.txt: runc only). So the script
#      creates RuntimeClass `ascend` with handler `runc` (deleted at the end; an existing one is
#      left alone): the Pods run under the class by name, and what is checked is the device
#      manager's side — the env the kubelet hands the container. Without the vendor runtime no
#      /dev/davinci<N> appears in the container; that is the runtime's job, not ours;
#   4. a Pod of 2 huawei.com/npu (runtimeClassName: ascend): ASCEND_VISIBLE_DEVICES names two
#      distinct ids of the host (physical ids; the 950's logic ids), and no flag is written;
#   5. a Pod of 1 huawei.com/npu.shared: where the host has the flag, its chip's flag is turned
#      on with one recorded `npu-smi set -t device-share … -d 1` (share-state.json shows it);
#   6. a Pod of one huawei.com/npu.sliced (25 % memory, 30 % cores): ENPU_LOG_LEVEL, ENPU_DSMI_HOOK,
#      /etc/enpu/vcann-rt/npu_info.config mounted with physical-npu-id naming the chip;
#   7. the 950 server: every one of those containers carries HCCL_TOPO_FILE_PATH naming
#      /usr/local/Ascend/driver/topo/950/atlas_850_2.json (spec/ascend.md §4.4: server-16p);
#      the other hosts none;
#   8. the A3 and the 950 server: the Devices object rig-node shows each accelerator's superPod
#      (A3: SDID, size 384, id 0, server index 40, the SDID's server and device the die's own;
#      950: size 16, id 0, server index 0, type 3); the 910B2 none;
#   9. churn: N Pods of 1 huawei.com/npu one after another, none rejected.
#
#   scripts/build-release.sh && N=20 scripts/rig-ascend.sh
#   scripts/rig-ascend.sh ascend-950-server-16p; scripts/rig-ascend.sh ascend-a3-server40-spod
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
N=${N:-20}

RECORDING=${1:-ascend-8x-910b2}
# The host's row: NPUs, the id ASCEND_VISIBLE_DEVICES carries (a regex of one), the vcann-rt
# build it is offered slices with, a slice's 25 % of its HBM, whether it has the share flag, the
# topology file its grants name, and what its Devices object's superPod shows.
TOPO=""; SPOD=none; FLAG=1; NPUS=8; ID='[0-7]'; FAMILY=cann-8-910b; QUOTA=16384
case "$RECORDING" in
  ascend-8x-910b2) ;;
  ascend-950-server-16p) NPUS=16; ID='([0-9]|1[0-5])'; FAMILY=cann-9-950; QUOTA=32768; FLAG=0
    TOPO=/usr/local/Ascend/driver/topo/950/atlas_850_2.json; SPOD=950 ;;
  ascend-a3-server40-spod) NPUS=16; ID='([0-9]|1[0-5])'; FAMILY=cann-8-910c; SPOD=a3 ;;
  *) echo "usage: $0 [ascend-8x-910b2|ascend-950-server-16p|ascend-a3-server40-spod]"; exit 2 ;;
esac
WORK=$(mktemp -d /tmp/rig-ascend.XXXXXX)
HOST=$WORK/$RECORDING
cp -a "$REPO/testdata/hosts/$RECORDING" "$HOST"
BUILD=/var/lib/gpustack/operator/lib/ascend/$FAMILY
made=()   # what this script created on the machine, removed at the end
made_dirs=() # the build's directories it created, removed (deepest first) at the end
for d in "$BUILD/lib" "$BUILD/tools" "$BUILD" "${BUILD%/*}" /var/lib/gpustack/operator/lib /var/lib/gpustack/operator /var/lib/gpustack; do
  [ -e "$d" ] || made_dirs+=("$d")
done
# The kubelet bind-mounts the build's files from this machine's own paths: stage stand-ins there.
for f in lib/libvruntime.so tools/enpu-monitor; do
  if [ ! -e "$BUILD/$f" ]; then
    mkdir -p "$(dirname "$BUILD/$f")"
    echo "stand-in $f (rig-ascend.sh)" > "$BUILD/$f"
    made+=("$BUILD/$f")
  fi
done

rig_up "/tmp/rig-ascend"
fresh_devices
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
  for d in "${made_dirs[@]}"; do rmdir "$d" 2>/dev/null; done
  rm -rf "$WORK"
}
trap stop EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
echo "host: $RECORDING"
for _ in $(seq 1 90); do [ "$(allocatable huawei.com/npu)" = $NPUS ] && [ -n "$(allocatable huawei.com/npu.sliced)" ] && break; sleep 1; done
echo "allocatable: huawei.com/npu $(allocatable huawei.com/npu), huawei.com/npu.shared $(allocatable huawei.com/npu.shared), huawei.com/npu.sliced $(allocatable huawei.com/npu.sliced)"
[ "$(allocatable huawei.com/npu)" = $NPUS ] || fail "huawei.com/npu is not $NPUS"
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1

pod() { # name limits(yaml flow): runs it under RuntimeClass ascend, prints what its container saw
  local command
  command=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' \
    'env | grep -E "^(ASCEND_|ENPU_|HCCL_)" | sort; [ -e /etc/enpu/vcann-rt/npu_info.config ] && cat /etc/enpu/vcann-rt/npu_info.config; for f in /opt/enpu/vcann-rt/lib/* /opt/enpu/vcann-rt/tools/*; do [ -e $f ] && echo mounted $f; done; sleep 3600')
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
expect ascend-exclusive "ASCEND_VISIBLE_DEVICES names two of the host's $NPUS ids" "^ASCEND_VISIBLE_DEVICES=$ID,$ID\$"
ids=$($KC logs ascend-exclusive 2>/dev/null | sed -n 's/^ASCEND_VISIBLE_DEVICES=//p')
[ "${ids%,*}" != "${ids#*,}" ] && echo "  ok: two distinct chips ($ids)" || fail "ASCEND_VISIBLE_DEVICES=$ids"
echo "  pod-resources: $($K/bin/podres -brief 2>/dev/null | grep 'default/ascend-exclusive' | tr '\n' ' ')"
flag_writes() { # the share-state.json's write count, or "none" where the host has no flag
  if [ "$FLAG" = 1 ]; then sed -n 's/.*"writes": \([0-9]*\).*/\1/p' "$HOST/share-state.json"; else echo none; fi
}
case "$FLAG,$(flag_writes)" in
  1,0) echo "  ok: exclusive wrote no flag" ;;
  0,none) echo "  ok: the host has no container-share flag (V2), none asked" ;;
  *) fail "exclusive wrote a flag: $(flag_writes)" ;;
esac
pod ascend-shared '{huawei.com/npu.shared: "1"}'
expect ascend-shared "ASCEND_VISIBLE_DEVICES names one id" "^ASCEND_VISIBLE_DEVICES=$ID\$"
case "$FLAG,$(flag_writes)" in
  1,1) echo "  ok: one npu-smi set -t device-share" ;;
  0,none) echo "  ok: no flag to turn on (V2)" ;;
  *) fail "share-state.json: $(tr -d '\n' <"$HOST/share-state.json")" ;;
esac
pod ascend-sliced '{huawei.com/npu.sliced: "1", huawei.com/npu.sliced.memory-percentage: "25", huawei.com/npu.sliced.cores-percentage: "30", huawei.com/npu.sliced.units: "400000"}'
expect ascend-sliced "ENPU_LOG_LEVEL=1" '^ENPU_LOG_LEVEL=1$'
expect ascend-sliced "ENPU_DSMI_HOOK=1" '^ENPU_DSMI_HOOK=1$'
expect ascend-sliced "npu_info.config: 30 % of the AI cores" '^aicore-quota=30$'
expect ascend-sliced "npu_info.config: 25 % of $((QUOTA * 4)) MiB" "^memory-quota=$QUOTA\$"
expect ascend-sliced "npu_info.config names a physical id" '^physical-npu-id=[0-9]+$'
expect ascend-sliced "vcann-rt and its reader mounted" '^mounted /opt/enpu/vcann-rt/(lib/libvruntime\.so|tools/enpu-monitor)$' 2
for p in ascend-exclusive ascend-shared ascend-sliced; do
  if [ -n "$TOPO" ]; then
    expect $p "HCCL_TOPO_FILE_PATH names ${TOPO##*/} (spec §4.4)" "^HCCL_TOPO_FILE_PATH=$(echo "$TOPO" | sed 's/\./\\./g')\$"
  else
    expect $p "no HCCL_TOPO_FILE_PATH (not a 950)" '^HCCL_TOPO_FILE_PATH=' 0
  fi
done
$KC delete pod ascend-exclusive ascend-shared ascend-sliced --wait=true --timeout=60s >/dev/null 2>&1

echo "=== the Devices object rig-node: each accelerator's superPod"
pods=""
for _ in $(seq 1 30); do
  pods=$($KC get devices.gpustack.ai rig-node -o json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
for g in d["spec"]["groups"]:
    for a in g["accelerators"]:
        print(a["index"], json.dumps(a.get("superPod"), sort_keys=True))' 2>/dev/null)
  [ -n "$pods" ] && break
  sleep 1
done
echo "$pods" | sed 's/^/  accelerator /'
SPOD_KIND=$SPOD python3 - "$pods" <<'PY' || failed=1
import json, os, sys
kind = os.environ["SPOD_KIND"]
rows = [l.split(" ", 1) for l in sys.argv[1].splitlines() if l.strip()]
pods = {int(i): json.loads(p) for i, p in rows}
def check(ok, what):
    print(("  ok: " if ok else "  WRONG: ") + what)
    return ok
good = check(len(pods) > 0, f"{len(pods)} accelerators in the Devices spec")
if kind == "none":
    good &= check(all(p is None for p in pods.values()), "no superPod (the host answers no spod-info)")
elif kind == "950":
    want = {"size": 16, "id": 0, "serverIndex": 0, "type": 3}
    good &= check(all(p == want for p in pods.values()), f"every superPod is {want}")
else:
    good &= check(all(p and (p["size"], p["id"], p["serverIndex"]) == (384, 0, 40) for p in pods.values()),
                  "every superPod: size 384, id 0, server index 40")
    parts = sorted(((p["sdid"] >> 22), p["sdid"] & 0xFFFF) for p in pods.values())
    good &= check(parts == [(40, d) for d in range(16)],
                  "the SDIDs unpack to server 40, devices 0..15, one a die")
    good &= check(any(p["sdid"] == 169082890 for p in pods.values()), "device 10's SDID is the real capture's 169082890")
sys.exit(0 if good else 1)
PY

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
