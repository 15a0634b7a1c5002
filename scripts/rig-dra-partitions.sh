#!/usr/bin/env bash
# rig-dra-partitions.sh — hardware partitions through DRA (issue 46, item 3) on the rig's real
# API server, scheduler and kubelet v1.36, with the CDI-capable containerd
# (scripts/rig-containerd.sh):
#   1. the nvidia daemon, `serve --dra`, on a copy of testdata/hosts/hgx-h100-8gpu-mig (8 H100s
#      in MIG mode, no instances; its MIG state follows the nvidia-smi mig commands run against
#      it); its pool: 144 partition devices (18 placements a GPU) in three slices and the eight
#      GPUs' counter sets in a fourth; the device plugin's nvidia.com/gpu.partitioned is 56;
#   2. claim mig-a (class mig.nvidia.gpustack.ai, CEL: profile == "3g.40gb" && index == 7): the
#      scheduler allocates a placement, the kubelet prepares it through our driver, the instance
#      is made at exactly that placement (the host's MIG state), the container sees its MIG
#      UUID through the claim's CDI spec, and the device plugin's allocatable drops to 53;
#   3. claim mig-b, the same selector: the scheduler's counters put it at the other placement
#      (slices 4–7), made there; claim mig-c (1g.10gb on GPU 7) stays Pending: GPU 7's eight
#      memory slices are consumed;
#   4. a device-plugin Pod asking mig-4g.40gb: its instance's placements leave the pool (GPU
#      6's devices over slices 0–3 are no longer published);
#   5. the daemon restarted while the claims' Pods run: the journal keeps their instances and
#      the allocatable count;
#   6. mig-a's Pod and claim deleted: the instance is destroyed (at the kubelet's unprepare, or
#      earlier, when the scheduler hands its slices to mig-c first: a claim no longer allocated
#      here is released before the next one is refused), and mig-c, Pending until then, is
#      allocated the freed slices, made and Running;
#   7. everything deleted: no instance is left and allocatable is 56 again.
#
#   scripts/rig-containerd.sh && scripts/build-release.sh && scripts/rig-dra-partitions.sh
#
# Needs root and the rig (../shared/rig/build.sh). CI cannot run it. The daemon's log stays in
# /tmp/rig-dra-partitions-serve.log.
set -u
. "$(dirname "$0")/rig-lib.sh"
dra_rig
DRA_APP=rig-dra-partitions
LOG=/tmp/rig-dra-partitions-serve.log
PART=nvidia.com/gpu.partitioned

WORK=$(mktemp -d /tmp/rig-dra-partitions.XXXXXX)
chmod 755 "$WORK"
HOST=$WORK/hgx-h100-8gpu-mig
cp -a "$REPO/testdata/hosts/hgx-h100-8gpu-mig" "$HOST"
SERVE=""
cleanup() { dra_down mig-dp; }
trap cleanup EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up

PATH=$CTRD2:$PATH rig_up /tmp/rig-dra-partitions
fresh_devices
$KC delete resourceslices --all >/dev/null 2>&1
$KC delete pod,resourceclaim -l app=$DRA_APP --wait=true --timeout=60s >/dev/null 2>&1
dra_classes
echo "DeviceClasses: $($KC get deviceclass -o jsonpath='{.items[*].metadata.name}')"

start_serve() {
  RUST_LOG=${RUST_LOG:-info} "$BIN" serve --node-name rig-node --manufacturer nvidia --host-root "$HOST" \
    --kubelet-dir $K/kubelet --data-dir "$WORK/data" --dra --cdi-dir "$CDI" >>"$LOG" 2>&1 &
  SERVE=$!
}
: >"$LOG"
T0=$(date +%s.%N)
start_serve

# The pool as the API server holds it: every slice of the driver on rig-node.
pool() {
  $KC get resourceslices --field-selector spec.driver=nvidia.gpustack.ai,spec.nodeName=rig-node -o json 2>/dev/null
}
pool_shape() {  # "<slices> <devices> <counter sets> <generations>"
  pool | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
print(len(items), sum(len(i["spec"].get("devices", [])) for i in items),
      sum(len(i["spec"].get("sharedCounters", [])) for i in items),
      ",".join(sorted({str(i["spec"]["pool"]["generation"]) for i in items})))' 2>/dev/null
}
pool_devices() {  # the names of the pool's devices on GPU $1
  pool | python3 -c '
import json, sys
for i in json.load(sys.stdin)["items"]:
    for d in i["spec"].get("devices", []):
        if d["attributes"]["gpustack.ai/index"]["int"] == int(sys.argv[1]): print(d["name"])' "$1" 2>/dev/null | sort | tr '\n' ' '
}
# The instances live on the host: "<gpu>:<start>:<profile>" each.
instances() {
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(" ".join(sorted("%d:%d:%s" % (i["gpu"], i["start"], i["profile"]) for i in s["instances"])))' "$HOST/mig-state.json"
}
wait_alloc() { for _ in $(seq 1 "${2:-60}"); do [ "$(allocatable $PART)" = "$1" ] && break; sleep 1; done; }

# 1. the pool
for _ in $(seq 1 300); do [ "$(pool_shape | cut -d' ' -f2)" = 144 ] && break; sleep 0.2; done
shape=$(pool_shape)
echo "pool nvidia.gpustack.ai on rig-node: ${shape:-none} (slices devices counter-sets generation), seen $(echo "$(date +%s.%N) - $T0" | bc | cut -c1-4) s after the daemon started"
[ "$(echo "$shape" | cut -d' ' -f1-3)" = "4 144 8" ] || fail "the pool is not 4 slices of 144 devices and 8 counter sets"
pool | python3 -c '
import json, sys
for i in json.load(sys.stdin)["items"]:
    for d in i["spec"].get("devices", []):
        if d["name"] == "gpu-7-3g-40gb-4":
            a = {k.split("/")[1]: list(v.values())[0] for k, v in d["attributes"].items()}
            print("  gpu-7-3g-40gb-4: profile=%s placement=%s+%s memory=%s consumes %s" % (a["profile"],
                a["placementStart"], a["placementSize"], d["capacity"]["gpustack.ai/memory"]["value"],
                ",".join(sorted(d["consumesCounters"][0]["counters"]))))'
wait_alloc 56
echo "allocatable $PART: $(allocatable $PART)"

PROFILE_ON_7='device.attributes["gpustack.ai"].profile == "%s" && device.attributes["gpustack.ai"].index == 7'
placed_at() {  # placed_at CLAIM: the allocated device's placement start, from its name
  allocated "$1" | sed -n 's/.*-\([0-9]*\)$/\1/p'
}
mig_uuid() { $KC logs "$1" 2>/dev/null | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p'; }

# 2. mig-a
T1=$(date +%s.%N)
claim mig-a mig.nvidia.gpustack.ai "$(printf "$PROFILE_ON_7" 3g.40gb)"
claim_pod dra-mig-a mig-a
if saw dra-mig-a; then
  echo "claim mig-a: allocated $(allocated mig-a), Running $(echo "$(date +%s.%N) - $T1" | bc | cut -c1-4) s after it was applied"
  start_a=$(placed_at mig-a)
  expect dra-mig-a "the container sees a MIG device through CDI" "^NVIDIA_VISIBLE_DEVICES=MIG-"
  echo "  instances on the host: $(instances)"
  case " $(instances) " in *" 7:$start_a:3g.40gb "*) echo "  ok: made at the allocated placement (GPU 7, slice $start_a)";;
    *) fail "no 3g.40gb instance at GPU 7 slice $start_a";; esac
  ls "$CDI"/gpustack-nvidia-*.json >/dev/null 2>&1 && echo "  ok: CDI spec $(ls "$CDI"/gpustack-nvidia-*.json | head -1)" || fail "no CDI spec"
fi
# GPU 7 keeps the room its free slices leave: 1g.10gb starts at 0-6, so three beside an instance
# at slice 0 and four beside one at slice 4; the other seven GPUs keep their seven.
want=$((49 + $([ "${start_a:-0}" = 0 ] && echo 3 || echo 4)))
wait_alloc $want
echo "allocatable $PART with mig-a prepared: $(allocatable $PART) (want $want: the claim's instance is no device-plugin token)"
[ "$(allocatable $PART)" = $want ] || fail "the claim's partition is counted by the device plugin"

# 3. mig-b beside it by the counters; mig-c Pending
claim mig-b mig.nvidia.gpustack.ai "$(printf "$PROFILE_ON_7" 3g.40gb)"
claim_pod dra-mig-b mig-b
if saw dra-mig-b; then
  start_b=$(placed_at mig-b)
  echo "claim mig-b: allocated $(allocated mig-b)"
  [ -n "$start_b" ] && [ "$start_b" != "${start_a:-x}" ] && echo "  ok: the scheduler's counters kept it off mig-a's slices" || fail "mig-b overlaps mig-a"
  case " $(instances) " in *" 7:$start_b:3g.40gb "*) echo "  ok: made at GPU 7, slice $start_b";; *) fail "no instance at GPU 7 slice $start_b";; esac
  [ "$(mig_uuid dra-mig-b)" != "$(mig_uuid dra-mig-a)" ] && echo "  ok: another MIG device ($(mig_uuid dra-mig-b))" || fail "the same MIG device twice"
fi
claim mig-c mig.nvidia.gpustack.ai "$(printf "$PROFILE_ON_7" 1g.10gb)"
claim_pod dra-mig-c mig-c
sleep 8
phase=$($KC get pod dra-mig-c -o jsonpath='{.status.phase}')
why=$($KC get pod dra-mig-c -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
echo "dra-mig-c (a 1g.10gb on GPU 7, all eight of its slices consumed): $phase: $why"
[ "$phase" = Pending ] || fail "mig-c was not kept Pending"

# 4. a device-plugin partition: its placements leave the pool
busybox_pod mig-dp "env | grep NVIDIA_VISIBLE_DEVICES; sleep 3600" \
  "{$PART: \"1\", $PART.mig-4g.40gb: \"1\"}"
if saw mig-dp; then
  dp=$(instances | tr ' ' '\n' | grep ':4g.40gb$')
  gpu=${dp%%:*}
  echo "mig-dp (device plugin, 4g.40gb): instance $dp"
  for _ in $(seq 1 30); do pool_devices "$gpu" | grep -q -- "-7g-80gb-0" || break; sleep 1; done
  left=$(pool_devices "$gpu")
  echo "  GPU $gpu's devices still published: $left"
  case "$left" in *"-7g-80gb-0 "*|*"-3g-40gb-0 "*|*"-1g-10gb-0 "*) fail "placements over the container's instance are still offered";;
    *) echo "  ok: the placements over slices 0-3 left the pool";; esac
fi

# 5. restart
wait_alloc 46
a=$(allocatable $PART)
echo "allocatable $PART with two claims and a container: $a (GPU 7 full, the container's GPU keeps its token and room for three 1g.10gb)"
[ "$a" = 46 ] || fail "allocatable $a, not 46"
kill "$SERVE"; wait "$SERVE" 2>/dev/null
start_serve
sleep 5
wait_alloc "$a"
echo "after the daemon restarted: allocatable $PART $(allocatable $PART), instances $(instances)"
[ "$(allocatable $PART)" = "$a" ] || fail "the restart changed what is held"

# 6. mig-a gone: destroyed, and mig-c takes its slices
$KC delete pod dra-mig-a --wait=true --timeout=60s >/dev/null 2>&1
$KC delete resourceclaim mig-a --wait=true --timeout=60s >/dev/null 2>&1
for _ in $(seq 1 30); do case " $(instances) " in *" 7:${start_a:-x}:3g.40gb "*) sleep 1;; *) break;; esac; done
echo "mig-a deleted: instances $(instances)"
case " $(instances) " in *" 7:${start_a:-x}:3g.40gb "*) fail "mig-a's instance was not destroyed";; *) echo "  ok: mig-a's instance destroyed at unprepare";; esac
if saw dra-mig-c; then
  start_c=$(placed_at mig-c)
  echo "claim mig-c: allocated $(allocated mig-c) once mig-a's slices were free"
  case " $(instances) " in *" 7:$start_c:1g.10gb "*) echo "  ok: made where allocated (GPU 7, slice $start_c)";; *) fail "mig-c's instance is not where allocated";; esac
fi

# 7. everything gone
$KC delete pod -l app=$DRA_APP --wait=true --timeout=60s >/dev/null 2>&1
$KC delete pod mig-dp --wait=true --timeout=60s >/dev/null 2>&1
$KC delete resourceclaim -l app=$DRA_APP --wait=true --timeout=60s >/dev/null 2>&1
for _ in $(seq 1 60); do [ -z "$(instances)" ] && [ "$(allocatable $PART)" = 56 ] && break; sleep 1; done
echo "all deleted: instances '$(instances)', allocatable $PART $(allocatable $PART), CDI specs $(ls "$CDI"/gpustack-*.json 2>/dev/null | wc -l)"
[ -z "$(instances)" ] || fail "instances left behind"
[ "$(allocatable $PART)" = 56 ] || fail "allocatable not back at 56"

curl -sk --cert $K/pki/admin.crt --key $K/pki/admin.key https://127.0.0.1:10250/metrics 2>/dev/null |
  awk '/^dra_grpc_operations_duration_seconds_(sum|count)\{/ && /gpustack/ {
      match($0, /method_name="[^"]*"/); n = substr($0, RSTART + 13, RLENGTH - 14); sub(/.*\//, "", n)
      if ($0 ~ /_sum\{/) s[n] += $2; else c[n] += $2 }
    END { for (n in c) if (c[n] > 0) printf "kubelet-measured %s: %d calls, mean %.2f ms\n", n, c[n], 1000 * s[n] / c[n] }' | sort
echo "daemon RSS: $(($(ps -o rss= -p "$SERVE" 2>/dev/null || echo 0) / 1024)) MiB; pool generation now $(pool_shape | cut -d' ' -f4)"
grep -h "partition .* to ResourceClaim\|its claim is unprepared" "$LOG" | sed 's/^/  log: /' | head -10
verdict rig-dra-partitions
