#!/usr/bin/env bash
# rig-dra.sh — the DRA driver (`serve --dra`, issue 46) on the rig's real API server, scheduler
# and kubelet v1.36, with a CDI-capable containerd built from source (scripts/rig-containerd.sh)
# in place of the rig's containerd 1.6:
#   1. three daemons on recorded hosts, each `serve --dra`: nvidia (hgx-h100-8gpu), ascend
#      (ascend-8x-910b2), mthreads (mthreads-8x-s4000); the chart's DeviceClasses applied
#      (helm template -s templates/deviceclasses.yaml); each publishes its ResourceSlice (the
#      driver, the device count, gpu-0's attributes printed);
#   2. a ResourceClaim by CEL selector (memory >= 40Gi and product == gpu-0's product) for an
#      NVIDIA card: the scheduler allocates it, the kubelet prepares it through our driver, the
#      container sees NVIDIA_VISIBLE_DEVICES = the allocated card's UUID through the claim's CDI
#      spec; the device plugin's allocatable nvidia.com/gpu drops to 7 (one ledger);
#      the Pod's status shows the device Healthy (our DRAResourceHealth stream); a Pod whose
#      sidecar lists the same claim: both containers see the claim's card;
#   3. a device-plugin Pod (nvidia.com/gpu: 1) runs on another card, which leaves the
#      ResourceSlice; a second claim is allocated neither card;
#   4. the nvidia daemon restarted while both claims' Pods run: the journal keeps the claims'
#      cards withheld (allocatable stays 6);
#   5. one claim each for Ascend and Moore Threads: their containers see
#      ASCEND_VISIBLE_DEVICES / MTHREADS_VISIBLE_DEVICES;
#   6. the Pods deleted: the kubelet unprepares, the CDI specs go, allocatable nvidia.com/gpu
#      is 8 again.
#   7. slices by consumable capacity: two claims of 40Gi/50 % and 30Gi/25 % on one H100 (CEL:
#      index == 3), their containers told CUDA_DEVICE_MEMORY_LIMIT_0 and CUDA_DEVICE_SM_LIMIT;
#      a third of 20Gi stays Pending (the scheduler's own accounting).
#   8. churn: three rounds of four device-plugin Pods and four claim Pods at once on the eight
#      cards; no card is held by two Running Pods;
#   9. a claim deleted with its Pod while the daemon is down: its card is reclaimed when the
#      daemon is back (the kubelet's unprepare, or our sweep of claims no longer reserved);
#   Hardware partitions by counters: scripts/rig-dra-partitions.sh; a Pod's nvidia.com/gpu through
#   the extended-resource mapping: scripts/rig-dra-extended.sh.
#
#   scripts/rig-containerd.sh && scripts/build-release.sh && scripts/rig-dra.sh
#
# Needs root and the rig (../shared/rig/build.sh). CI cannot run it. The daemons' logs stay in
# /tmp/rig-dra-<manufacturer>-serve.log.
set -u
. "$(dirname "$0")/rig-lib.sh"
dra_rig

WORK=$(mktemp -d /tmp/rig-dra.XXXXXX)
chmod 755 "$WORK"
declare -A SERVE=()
MS=(nvidia ascend mthreads)
declare -A HOSTS=([nvidia]=hgx-h100-8gpu [ascend]=ascend-8x-910b2 [mthreads]=mthreads-8x-s4000)
declare -A VAR=([nvidia]=NVIDIA_VISIBLE_DEVICES [ascend]=ASCEND_VISIBLE_DEVICES [mthreads]=MTHREADS_VISIBLE_DEVICES)
cleanup() {
  $KC delete pod -l app=rig-dra --wait=true --timeout=60s >/dev/null 2>&1
  $KC delete resourceclaim -l app=rig-dra --wait=true --timeout=60s >/dev/null 2>&1
  for m in "${!SERVE[@]}"; do kill "${SERVE[$m]}" 2>/dev/null; wait "${SERVE[$m]}" 2>/dev/null; done
  $KC delete resourceslices --all >/dev/null 2>&1
  $KC delete deviceclass -l app.kubernetes.io/name=device-manager >/dev/null 2>&1
  rig_down
  rm -f "$CDI"/gpustack-*.json
  for f in "${made_lib[@]}"; do rm -f "$f" 2>/dev/null || rmdir "$f" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up

# Slices need the preload library staged (a stand-in: nothing runs CUDA here), under the
# recorded host's root (the offer) and on this machine (CDI mounts it from there).
LIB=/var/lib/gpustack/operator/lib/cuda-13/libvgpu.so
made_lib=()
for d in /var/lib/gpustack /var/lib/gpustack/operator /var/lib/gpustack/operator/lib "$(dirname $LIB)"; do
  [ -e "$d" ] || made_lib=("$d" "${made_lib[@]}")
done
if [ ! -e "$LIB" ]; then
  mkdir -p "$(dirname $LIB)"
  echo "stand-in preload library (rig-dra.sh)" > "$LIB"
  made_lib=("$LIB" "${made_lib[@]}")
fi

# The rig's node with containerd 2 first on its PATH (node-up.sh runs `containerd` from PATH).
PATH=$CTRD2:$PATH rig_up /tmp/rig-dra
echo "containerd: $($K/bin/kubectl get node rig-node -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}')"
fresh_devices
$KC delete resourceslices --all >/dev/null 2>&1
# What an interrupted run left in the rig's etcd.
$KC delete pod,resourceclaim -l app=rig-dra --wait=true --timeout=60s >/dev/null 2>&1
dra_classes
echo "DeviceClasses: $($KC get deviceclass -o jsonpath='{.items[*].metadata.name}')"

start_serve() {  # start_serve M: the daemon of M on its recorded host, --dra
  local m=$1
  if [ ! -d "$WORK/$m" ]; then
    mkdir -p "$WORK/$m"
    cp -a "$REPO/testdata/hosts/${HOSTS[$m]}" "$WORK/$m/host"
    if [ "$m" = nvidia ]; then
      mkdir -p "$WORK/$m/host/root$(dirname $LIB)"
      cp "$LIB" "$WORK/$m/host/root$LIB"
    fi
  fi
  RUST_LOG=${RUST_LOG:-info} "$BIN" serve --node-name rig-node --manufacturer "$m" --host-root "$WORK/$m/host" \
    --kubelet-dir $K/kubelet --data-dir "$WORK/$m/data" --dra --cdi-dir "$CDI" \
    >>"/tmp/rig-dra-$m-serve.log" 2>&1 &
  SERVE[$m]=$!
}
T0=$(date +%s.%N)
for m in "${MS[@]}"; do : >"/tmp/rig-dra-$m-serve.log"; start_serve "$m"; done

slice_json() { $KC get resourceslice "rig-node-$1.gpustack.ai" -o json 2>/dev/null; }
devices_of() { slice_json "$1" | python3 -c 'import json,sys; print(" ".join(d["name"] for d in json.load(sys.stdin)["spec"]["devices"]))' 2>/dev/null; }
attr() {  # attr M DEVICE KEY: a device's attribute value from the slice
  slice_json "$1" | python3 -c '
import json, sys
d = next(d for d in json.load(sys.stdin)["spec"]["devices"] if d["name"] == sys.argv[1])
a = d["attributes"]["gpustack.ai/" + sys.argv[2]]
print(next(iter(a.values())))' "$2" "$3" 2>/dev/null
}
for m in "${MS[@]}"; do
  for _ in $(seq 1 300); do [ -n "$(devices_of "$m")" ] && break; sleep 0.2; done
  d=$(devices_of "$m")
  [ -n "$d" ] || { fail "$m: no ResourceSlice"; continue; }
  echo "ResourceSlice rig-node-$m.gpustack.ai: $(echo "$d" | wc -w) devices ($d), seen $(echo "$(date +%s.%N) - $T0" | bc | cut -c1-4) s after the daemons started"
  dev=${d%% *}
  echo "  $dev: product=$(attr "$m" "$dev" product) uuid=$(attr "$m" "$dev" uuid) healthy=$(attr "$m" "$dev" healthy)"
done
for _ in $(seq 1 60); do [ "$(allocatable nvidia.com/gpu)" = 8 ] && break; sleep 1; done
echo "allocatable nvidia.com/gpu: $(allocatable nvidia.com/gpu)"


# 2. a claim by CEL selector
PRODUCT=$(attr nvidia gpu-0 product)
claim gpu-a nvidia.gpustack.ai "device.capacity[\"gpustack.ai\"].memory.compareTo(quantity(\"40Gi\")) >= 0 && device.attributes[\"gpustack.ai\"].product == \"$PRODUCT\""
claim_pod dra-a gpu-a
if saw dra-a; then
  DEV_A=$(allocated gpu-a)
  UUID_A=$(attr nvidia "$DEV_A" uuid)
  echo "claim gpu-a (memory >= 40Gi, product == $PRODUCT): allocated $DEV_A ($UUID_A)"
  expect dra-a "the container sees the claim's card through CDI" "^NVIDIA_VISIBLE_DEVICES=$UUID_A\$"
  ls "$CDI"/gpustack-nvidia-*.json >/dev/null 2>&1 && echo "  ok: CDI spec $(ls "$CDI"/gpustack-nvidia-*.json)" || fail "no CDI spec"
  # The device's health as our DRAResourceHealth stream told the kubelet.
  st=""
  for _ in $(seq 1 30); do
    st=$($KC get pod dra-a -o jsonpath='{.status.containerStatuses[0].allocatedResourcesStatus}')
    echo "$st" | grep -q Healthy && break
    sleep 1
  done
  echo "dra-a allocatedResourcesStatus: $st"
  echo "$st" | grep -q "\"health\":\"Healthy\"" && echo "  ok: the kubelet shows the device's health from our stream" || fail "no device health in the Pod's status"
fi
for _ in $(seq 1 30); do [ "$(allocatable nvidia.com/gpu)" = 7 ] && break; sleep 1; done
a=$(allocatable nvidia.com/gpu)
echo "allocatable nvidia.com/gpu with the claim prepared: $a"
[ "$a" = 7 ] || fail "the claim's card is still the device plugin's (allocatable $a)"

# 2b. a Pod's sidecar (an SSH server, say) sees its claim's card by listing the same claim: the
# kubelet allocates device-plugin resources at admission, before it prepares claims, so the
# device plugin's visibility resource cannot show a claim's cards.
claim gpu-v nvidia.gpustack.ai
cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: dra-v, namespace: default, labels: {app: rig-dra}}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  resourceClaims:
  - {name: acc, resourceClaimName: gpu-v}
  containers:
  - name: main
    image: localhost/rig/busybox:1.0
    imagePullPolicy: Never
    command: ["sh", "-c", "env | grep VISIBLE_DEVICES; sleep 3600"]
    resources: {claims: [{name: acc}]}
  - name: sshd
    image: localhost/rig/busybox:1.0
    imagePullPolicy: Never
    command: ["sh", "-c", "env | grep VISIBLE_DEVICES; sleep 3600"]
    resources: {claims: [{name: acc}]}
EOT
if running dra-v; then
  sleep 1
  um=$($KC logs dra-v -c main | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p')
  us=$($KC logs dra-v -c sshd | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p')
  echo "dra-v: claim gpu-v allocated $(allocated gpu-v); main sees $um, the sidecar listing the same claim sees $us"
  [ -n "$um" ] && [ "$um" = "$us" ] && echo "  ok: the sidecar sees the claim's card" || fail "the sidecar does not see the claim's card"
fi
$KC delete pod dra-v --wait=true --timeout=60s >/dev/null 2>&1
for _ in $(seq 1 30); do [ "$(allocatable nvidia.com/gpu)" = 7 ] && break; sleep 1; done

# 3. a device-plugin Pod, then a second claim
busybox_pod dra-dp "env | grep VISIBLE_DEVICES; sleep 3600" '{nvidia.com/gpu: "1"}'
$KC label pod dra-dp app=rig-dra >/dev/null
if saw dra-dp; then
  UUID_DP=$($KC logs dra-dp | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p')
  [ "$UUID_DP" != "${UUID_A:-}" ] && echo "  ok: the device plugin gave another card ($UUID_DP)" || fail "the device plugin gave the claim's card"
  for _ in $(seq 1 30); do [ "$(devices_of nvidia | wc -w)" = 7 ] && break; sleep 1; done
  echo "ResourceSlice devices with a container's card withdrawn: $(devices_of nvidia | wc -w)"
  [ "$(devices_of nvidia | wc -w)" = 7 ] || fail "the container's card is still offered through DRA"
fi
claim gpu-b nvidia.gpustack.ai
claim_pod dra-b gpu-b
if saw dra-b; then
  UUID_B=$($KC logs dra-b | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p')
  echo "claim gpu-b: allocated $(allocated gpu-b) ($UUID_B)"
  case "$UUID_B" in "${UUID_A:-x}"|"${UUID_DP:-x}"|"") fail "the second claim got a held card";; *) echo "  ok: neither held card";; esac
fi

# 4. restart with the claims prepared
for _ in $(seq 1 30); do [ "$(allocatable nvidia.com/gpu)" = 6 ] && break; sleep 1; done
a=$(allocatable nvidia.com/gpu)
echo "allocatable nvidia.com/gpu with two claims and a container: $a"
[ "$a" = 6 ] || fail "the second claim's card is still the device plugin's (allocatable $a)"
kill "${SERVE[nvidia]}"; wait "${SERVE[nvidia]}" 2>/dev/null
start_serve nvidia
sleep 5
for _ in $(seq 1 60); do [ "$(allocatable nvidia.com/gpu)" = 6 ] && break; sleep 1; done
a=$(allocatable nvidia.com/gpu)
echo "allocatable nvidia.com/gpu after the daemon restarted (two claims' cards withheld): $a"
[ "$a" = 6 ] || fail "the restart lost a claim (allocatable $a)"

# 5. the other manufacturers
for m in ascend mthreads; do
  claim "acc-$m" "$m.gpustack.ai"
  claim_pod "dra-$m" "acc-$m"
  if saw "dra-$m"; then
    echo "claim acc-$m: allocated $(allocated "acc-$m")"
    expect "dra-$m" "$m's container sees its card through CDI" "^${VAR[$m]}=." 1
  fi
done

# 6. the Pods gone: unprepared, specs removed, cards back
$KC delete pod -l app=rig-dra --wait=true --timeout=60s >/dev/null 2>&1
for _ in $(seq 1 60); do
  [ "$(allocatable nvidia.com/gpu)" = 8 ] && ! ls "$CDI"/gpustack-*.json >/dev/null 2>&1 && break
  sleep 1
done
a=$(allocatable nvidia.com/gpu)
echo "after the Pods were deleted: allocatable nvidia.com/gpu $a, CDI specs left: $(ls "$CDI"/gpustack-*.json 2>/dev/null | wc -l)"
[ "$a" = 8 ] || fail "the claims' cards did not come back (allocatable $a)"
ls "$CDI"/gpustack-*.json >/dev/null 2>&1 && fail "CDI specs left behind"
# 7. slices by consumable capacity: two on one card within its memory, a third Pending
claim slice-1 nvidia.gpustack.ai 'device.attributes["gpustack.ai"].index == 3' 40Gi 50
claim slice-2 nvidia.gpustack.ai 'device.attributes["gpustack.ai"].index == 3' 30Gi 25
claim slice-3 nvidia.gpustack.ai 'device.attributes["gpustack.ai"].index == 3' 20Gi 10
claim_pod dra-s1 slice-1
claim_pod dra-s2 slice-2
if saw dra-s1 && saw dra-s2; then
  echo "claim slice-1: $($KC get resourceclaim slice-1 -o jsonpath='{.status.allocation.devices.results[0].device} consumed {.status.allocation.devices.results[0].consumedCapacity}')"
  echo "claim slice-2: $($KC get resourceclaim slice-2 -o jsonpath='{.status.allocation.devices.results[0].device} consumed {.status.allocation.devices.results[0].consumedCapacity}')"
  expect dra-s1 "slice-1's memory limit is its 40Gi" "^CUDA_DEVICE_MEMORY_LIMIT_0=40960m\$"
  expect dra-s1 "slice-1's compute cap is its 50 %" "^CUDA_DEVICE_SM_LIMIT=50\$"
  expect dra-s2 "slice-2's memory limit is its 30Gi" "^CUDA_DEVICE_MEMORY_LIMIT_0=30720m\$"
  u1=$($KC logs dra-s1 | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p'); u2=$($KC logs dra-s2 | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p')
  [ -n "$u1" ] && [ "$u1" = "$u2" ] && echo "  ok: both slices on one card ($u1)" || fail "the slices are not on one card ($u1, $u2)"
fi
claim_pod dra-s3 slice-3
sleep 10
phase=$($KC get pod dra-s3 -o jsonpath='{.status.phase}')
why=$($KC get pod dra-s3 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
echo "dra-s3 (20Gi more than the card has left): $phase: $why"
[ "$phase" = Pending ] || fail "the third slice was not kept Pending"
$KC delete pod dra-s1 dra-s2 dra-s3 --wait=true --timeout=60s >/dev/null 2>&1
for _ in $(seq 1 60); do [ "$(allocatable nvidia.com/gpu)" = 8 ] && break; sleep 1; done
echo "after the slices' Pods were deleted: allocatable nvidia.com/gpu $(allocatable nvidia.com/gpu)"
# 8. churn across the two APIs: each round four device-plugin Pods and four claim Pods at once
# on the eight cards; no card may ever be held by two Running Pods.
uuid_of() { $KC logs "$1" 2>/dev/null | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p'; }
for r in 1 2 3; do
  jobs_=()
  for i in 1 2 3 4; do
    claim "churn-$r-$i" nvidia.gpustack.ai
    claim_pod "cl-$r-$i" "churn-$r-$i" &
    jobs_+=($!)
    busybox_pod "dp-$r-$i" "env | grep VISIBLE_DEVICES; sleep 3600" '{nvidia.com/gpu: "1"}' &
    jobs_+=($!)
  done
  wait "${jobs_[@]}"  # not the daemons, which are this script's children too
  for i in 1 2 3 4; do $KC label pod "dp-$r-$i" app=rig-dra >/dev/null 2>&1; done
  for _ in $(seq 1 45); do
    n=$($KC get pods -l app=rig-dra --no-headers 2>/dev/null | grep -c Running)
    [ "$n" = 8 ] && break
    sleep 1
  done
  sleep 2
  uuids=(); states=""
  for p in $($KC get pods -l app=rig-dra -o jsonpath='{.items[*].metadata.name}'); do
    ph=$($KC get pod "$p" -o jsonpath='{.status.phase}')
    states="$states $p=$ph"
    [ "$ph" = Running ] && uuids+=("$(uuid_of "$p")")
  done
  distinct=$(printf '%s\n' "${uuids[@]}" | sort -u | grep -c .)
  echo "churn round $r: ${#uuids[@]} Running on $distinct distinct cards;$states"
  [ "${#uuids[@]}" = "$distinct" ] || fail "churn round $r: a card held by two Running Pods"
  $KC delete pod -l app=rig-dra --wait=true --timeout=90s >/dev/null 2>&1
  for i in 1 2 3 4; do $KC delete resourceclaim "churn-$r-$i" --wait=false >/dev/null 2>&1; done
  for _ in $(seq 1 60); do [ "$(allocatable nvidia.com/gpu)" = 8 ] && break; sleep 1; done
done
echo "after the churn: allocatable nvidia.com/gpu $(allocatable nvidia.com/gpu)"
[ "$(allocatable nvidia.com/gpu)" = 8 ] || fail "cards not back after the churn"

# 9. a claim whose Pod and claim go while the daemon is down: reclaimed when it is back.
claim gone-1 nvidia.gpustack.ai
claim_pod dra-gone gone-1
if running dra-gone; then
  kill "${SERVE[nvidia]}"; wait "${SERVE[nvidia]}" 2>/dev/null
  $KC delete pod dra-gone --wait=false >/dev/null 2>&1
  $KC delete resourceclaim gone-1 --wait=false >/dev/null 2>&1
  sleep 5
  start_serve nvidia
  for _ in $(seq 1 90); do [ "$(allocatable nvidia.com/gpu)" = 8 ] && break; sleep 1; done
  a=$(allocatable nvidia.com/gpu)
  echo "a claim deleted with its Pod while the daemon was down: allocatable nvidia.com/gpu $a once it is back"
  [ "$a" = 8 ] || fail "the gone claim's card was not reclaimed"
  grep -h "released a claim no longer allocated\|unprepared claim.*gone-1" /tmp/rig-dra-nvidia-serve.log | tail -2 | sed 's/^/  log: /'
fi

# What the kubelet measured of our driver, and what the daemons hold in memory.
curl -sk --cert $K/pki/admin.crt --key $K/pki/admin.key https://127.0.0.1:10250/metrics 2>/dev/null |
  awk '/^dra_grpc_operations_duration_seconds_(sum|count)\{/ && /gpustack/ {
      match($0, /driver_name="[^"]*"/); d = substr($0, RSTART + 13, RLENGTH - 14)
      match($0, /method_name="[^"]*"/); n = substr($0, RSTART + 13, RLENGTH - 14); sub(/.*\//, "", n)
      k = d " " n; if ($0 ~ /_sum\{/) s[k] += $2; else c[k] += $2 }
    END { for (k in c) if (c[k] > 0) printf "kubelet-measured %s: %d calls, mean %.2f ms\n", k, c[k], 1000 * s[k] / c[k] }' | sort
for m in "${MS[@]}"; do
  echo "daemon $m RSS: $(($(ps -o rss= -p "${SERVE[$m]}" 2>/dev/null || echo 0) / 1024)) MiB"
done
echo "ResourceSlice rig-node-nvidia.gpustack.ai generation: $($KC get resourceslice rig-node-nvidia.gpustack.ai -o jsonpath='{.spec.pool.generation}') ($(grep -c 'ResourceSlice: Updated' /tmp/rig-dra-nvidia-serve.log) updates: the device plugin's container card withdrawn and given back)"
grep -h "prepared claim\|unprepared claim\|granted .* to ResourceClaim\|released ResourceClaim" /tmp/rig-dra-*-serve.log | sed 's/^/  log: /' | head -20
verdict rig-dra
