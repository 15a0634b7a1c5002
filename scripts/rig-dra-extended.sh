#!/usr/bin/env bash
# rig-dra-extended.sh — a Pod written for the device plugin served through DRA's extended-resource
# mapping (issue 46, item 6; Kubernetes 1.36, DRAExtendedResource beta) on the rig's real API
# server, scheduler and kubelet, with the CDI-capable containerd (scripts/rig-containerd.sh):
#   1. the chart's DeviceClasses with dra.extendedResource=true (nvidia.gpustack.ai names
#      nvidia.com/gpu as its extendedResourceName) and the nvidia daemon on a copy of
#      testdata/hosts/hgx-h100-8gpu with `serve --dra --dra-extended-resource`: it registers no
#      nvidia.com/gpu device plugin (allocatable 0 or absent), the other families as before;
#   2. a Pod asking `nvidia.com/gpu: 2` in its limits, nothing of DRA in it: the scheduler makes
#      its claim (status.extendedResourceClaimStatus), allocates two of our devices, the kubelet
#      prepares it through our driver, and the container sees both cards' UUIDs;
#   3. a Pod asking nvidia.com/gpu.shared through the device plugin beside it: another card (one
#      ledger);
#   4. both deleted: the claim goes with its Pod, the cards come back (ResourceSlice whole again).
#
#   scripts/rig-containerd.sh && scripts/build-release.sh && scripts/rig-dra-extended.sh
#
# Needs root and the rig (../shared/rig/build.sh). CI cannot run it. The daemon's log stays in
# /tmp/rig-dra-extended-serve.log.
set -u
. "$(dirname "$0")/rig-lib.sh"
dra_rig
DRA_APP=rig-dra-extended
LOG=/tmp/rig-dra-extended-serve.log

WORK=$(mktemp -d /tmp/rig-dra-extended.XXXXXX)
chmod 755 "$WORK"
HOST=$WORK/hgx-h100-8gpu
cp -a "$REPO/testdata/hosts/hgx-h100-8gpu" "$HOST"
SERVE=""
cleanup() { dra_down ext-a ext-shared; }
trap cleanup EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up

PATH=$CTRD2:$PATH rig_up /tmp/rig-dra-extended
fresh_devices
$KC delete resourceslices --all >/dev/null 2>&1
$KC delete pod ext-a ext-shared --wait=true --timeout=60s >/dev/null 2>&1
dra_classes dra.extendedResource=true
echo "DeviceClass nvidia.gpustack.ai extendedResourceName: $($KC get deviceclass nvidia.gpustack.ai -o jsonpath='{.spec.extendedResourceName}')"

: >"$LOG"
RUST_LOG=${RUST_LOG:-info} "$BIN" serve --node-name rig-node --manufacturer nvidia --host-root "$HOST" \
  --kubelet-dir $K/kubelet --data-dir "$WORK/data" --dra --dra-extended-resource --cdi-dir "$CDI" \
  >>"$LOG" 2>&1 &
SERVE=$!
devices() { $KC get resourceslice rig-node-nvidia.gpustack.ai -o jsonpath='{.spec.devices[*].name}' 2>/dev/null; }
for _ in $(seq 1 100); do [ "$(devices | wc -w)" = 8 ] && break; sleep 0.3; done
for _ in $(seq 1 60); do [ -n "$(allocatable nvidia.com/gpu.shared)" ] && break; sleep 1; done
echo "ResourceSlice: $(devices | wc -w) devices; allocatable nvidia.com/gpu: '$(allocatable nvidia.com/gpu)', nvidia.com/gpu.shared: $(allocatable nvidia.com/gpu.shared)"
[ "$(devices | wc -w)" = 8 ] || fail "no ResourceSlice of 8 devices"
case "$(allocatable nvidia.com/gpu)" in ""|0) echo "  ok: no nvidia.com/gpu device plugin on the node";; *) fail "nvidia.com/gpu is still the device plugin's";; esac
grep -q '"nvidia.com/gpu",' "$LOG" && fail "the daemon registered nvidia.com/gpu"
grep -h "serving \[" "$LOG" | head -1 | sed 's/^.*serving/  the daemon serves/'

# 2. a device-plugin Pod, served by DRA
T1=$(date +%s.%N)
busybox_pod ext-a "env | grep NVIDIA_VISIBLE_DEVICES; sleep 3600" '{nvidia.com/gpu: "2"}'
if saw ext-a; then
  echo "ext-a (limits nvidia.com/gpu: 2): Running $(echo "$(date +%s.%N) - $T1" | bc | cut -c1-4) s after it was applied"
  st=$($KC get pod ext-a -o jsonpath='{.status.extendedResourceClaimStatus}')
  echo "  status.extendedResourceClaimStatus: $st"
  name=$($KC get pod ext-a -o jsonpath='{.status.extendedResourceClaimStatus.resourceClaimName}')
  [ -n "$name" ] && echo "  ok: the scheduler made claim $name" || fail "no extended-resource claim"
  echo "  its devices: $($KC get resourceclaim "$name" -o jsonpath='{.status.allocation.devices.results[*].device}' 2>/dev/null)"
  seen=$($KC logs ext-a | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p')
  n=$(echo "$seen" | tr ',' '\n' | grep -c '^GPU-')
  [ "$n" = 2 ] && echo "  ok: the container sees two cards through the claim's CDI spec ($seen)" || fail "the container sees $n cards ($seen)"
fi
for _ in $(seq 1 30); do [ "$(devices | wc -w)" = 8 ] && break; sleep 1; done

# 3. the device plugin beside it
busybox_pod ext-shared "env | grep NVIDIA_VISIBLE_DEVICES; sleep 3600" '{nvidia.com/gpu.shared: "1"}'
if saw ext-shared; then
  shared=$($KC logs ext-shared | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p')
  case ",${seen:-}," in *",$shared,"*) fail "the device plugin shared a card the claim holds ($shared)";;
    *) echo "  ok: the shared Pod got another card ($shared)";; esac
fi

# 4. gone
$KC delete pod ext-a ext-shared --wait=true --timeout=60s >/dev/null 2>&1
for _ in $(seq 1 60); do
  [ -z "$(ls "$CDI"/gpustack-*.json 2>/dev/null)" ] && [ "$(devices | wc -w)" = 8 ] && break
  sleep 1
done
left=$($KC get resourceclaim -o name 2>/dev/null | wc -l)
echo "after both were deleted: claims left $left, CDI specs $(ls "$CDI"/gpustack-*.json 2>/dev/null | wc -l), slice devices $(devices | wc -w)"
[ "$left" = 0 ] || fail "the extended-resource claim outlived its Pod"
ls "$CDI"/gpustack-*.json >/dev/null 2>&1 && fail "CDI specs left behind"
grep -h "prepared claim\|unprepared claim\|granted .* to ResourceClaim" "$LOG" | sed 's/^/  log: /' | head -6
verdict rig-dra-extended
