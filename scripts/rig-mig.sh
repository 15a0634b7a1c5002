#!/usr/bin/env bash
# rig-mig.sh — the partitioned family (issue 13) on the rig's real kubelet (../shared/rig):
#   1. serve on a copy of testdata/hosts/hgx-h100-8gpu-mig (8 H100s in MIG mode, no instances;
#      its MIG state changes with the nvidia-smi mig commands run against it);
#   2. the kubelet registers nvidia.com/gpu.partitioned with 56 allocatable tokens, and the Node
#      carries the capacity keys of the worked example;
#   3. a Pod asking for a 3g.40gb partition runs, its container sees NVIDIA_VISIBLE_DEVICES=MIG-…,
#      allocatable drops to 53, and `detect` on the same host shows the instance serve made;
#   4. serve restarted with its ledger journal deleted: the partition is rebuilt from its
#      ownership record (allocatable stays at 53, the Pod keeps running, the log says so);
#   5. a 1g.10gb carved "by hand" on GPU 7 (written into the host's mig-state.json), owned by no
#      Pod and idle, is destroyed after the debounce (serve runs with
#      --partition-orphan-debounce 3s);
#   6. a 4g.40gb carved by hand on GPU 6 with a compute process on it: allocatable drops to 49
#      and the node's mig-1g.10gb capacity key to 48 (live occupancy counts, and a busy instance
#      is no room), it is kept past the debounce, and once idle it is destroyed and they are back
#      at 53 and 52;
#   7. the Pod deleted: the instance is reclaimed and allocatable is back at 56.
#
#   scripts/build-release.sh && scripts/rig-mig.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
WORK=$(mktemp -d /tmp/rig-mig.XXXXXX)
HOST=$WORK/hgx-h100-8gpu-mig
cp -a "$REPO/testdata/hosts/hgx-h100-8gpu-mig" "$HOST"
rig_up "/tmp/rig-mig"
D=$WORK/data
serve() { # at info, so the orphan pass's destroy is in the log the checks read
  RUST_LOG=${RUST_LOG:-info} MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --node-name rig-node --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" \
    --partition-orphan-debounce 3s >>/tmp/rig-mig-serve.log 2>&1 &
  SERVE=$!
}
: >/tmp/rig-mig-serve.log
serve
stop() { kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null; $KC delete pod mig-pod --wait=false >/dev/null 2>&1
  rig_down; rm -rf "$WORK"; }
trap stop EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
alloc() { $KC get node rig-node -o jsonpath="{.status.allocatable.nvidia\.com/gpu\.partitioned}" 2>/dev/null; }
want() { # value label
  for _ in $(seq 1 60); do [ "$(alloc)" = "$1" ] && break; sleep 1; done
  echo "$2: allocatable nvidia.com/gpu.partitioned: $(alloc) (want $1)"
  [ "$(alloc)" = "$1" ] || failed=1
}
want 56 "registered"
echo "node capacity keys:"
$KC get node rig-node -o json | python3 -c '
import json,sys
c=json.load(sys.stdin)["status"]["capacity"]
for k in sorted(c):
    if k.startswith("nvidia.com/gpu.partitioned"): print("  %s: %s" % (k, c[k]))'
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1
busybox_pod mig-pod "env | grep NVIDIA_VISIBLE_DEVICES; sleep 3600" \
  '{nvidia.com/gpu.partitioned: "1", nvidia.com/gpu.partitioned.mig-3g.40gb: "1"}'
if running mig-pod 90; then
  sleep 1
  echo "mig-pod: Running; its container: $($KC logs mig-pod 2>/dev/null)"
  $KC logs mig-pod 2>/dev/null | grep -q '^NVIDIA_VISIBLE_DEVICES=MIG-' || failed=1
fi
want 53 "after one 3g.40gb"
echo "detect on the same host now:"
"$BIN" detect --host-root "$HOST" -o json 2>/dev/null | python3 -c '
import json,sys
d=json.load(sys.stdin)
for m in d.get("manufacturers", []):
    for a in m.get("accelerators", []):
        for g in a.get("migDevices", []) or []:
            print("  GPU %s: %s" % (a.get("index"), json.dumps(g, sort_keys=True)[:200]))'
echo "serve restarted with its ledger journal deleted:"
kill $SERVE; wait $SERVE 2>/dev/null
rm -f "$D/ledger.journal"
serve
sleep 5
want 53 "after the restart without a journal"
if grep -q "from its ownership record" /tmp/rig-mig-serve.log; then
  echo "  the partition was rebuilt from its ownership record"
else
  echo "  NOT rebuilt from its ownership record"; failed=1
fi
[ "$($KC get pod mig-pod -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ] || {
  echo "  mig-pod is not Running after the restart"; failed=1; }
echo "a 1g.10gb carved by hand on GPU 7, owned by no Pod and idle:"
python3 - "$HOST/mig-state.json" <<'PY'
import json, sys
path = sys.argv[1]
state = json.load(open(path))
used = {i["gpuInstance"] for i in state["instances"] if i["gpu"] == 7}
gi = min(set(range(1, 16)) - used)
state["instances"].append({"gpu": 7, "gpuInstance": gi, "profileId": 19, "profile": "1g.10gb",
    "start": 0, "size": 1, "computeInstances": [{"id": 0, "uuid": "MIG-hand-carved-on-the-rig"}]})
import os
with open(path + ".tmp", "w") as f:
    json.dump(state, f, indent=2)
os.replace(path + ".tmp", path)
PY
for _ in $(seq 1 30); do grep -q MIG-hand-carved-on-the-rig "$HOST/mig-state.json" || break; sleep 1; done
if grep -q MIG-hand-carved-on-the-rig "$HOST/mig-state.json"; then
  echo "  NOT destroyed"; failed=1
else
  echo "  destroyed after the debounce: $(grep -c 'destroyed the unowned' /tmp/rig-mig-serve.log) log line(s)"
fi
echo "a 4g.40gb carved by hand on GPU 6 with a compute process running on it:"
busy_4g() { # true: carve it busy on GPU 6; false: its process ends
  python3 - "$HOST/mig-state.json" 6 "$1" <<'PY'
import json, os, sys
path, gpu, busy = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "true"
state = json.load(open(path))
if busy:
    used = {i["gpuInstance"] for i in state["instances"] if i["gpu"] == gpu}
    gi = min(set(range(1, 16)) - used)
    state["instances"].append({"gpu": gpu, "gpuInstance": gi, "profileId": 5, "profile": "4g.40gb",
        "start": 0, "size": 4, "busy": True,
        "computeInstances": [{"id": 0, "uuid": "MIG-hand-busy-on-the-rig"}]})
else:
    for i in state["instances"]:
        if i["gpu"] == gpu:
            i["busy"] = False
with open(path + ".tmp", "w") as f:
    json.dump(state, f, indent=2)
os.replace(path + ".tmp", path)
PY
}
busy_4g true
# GPU 6 keeps 3 tokens (1g at slices 4-6): the busy instance is no room for anyone.
want 49 "  with it (live occupancy, not the ledger alone)"
cap1g() { $KC get node rig-node -o jsonpath="{.status.capacity.nvidia\.com/gpu\.partitioned\.mig-1g\.10gb}" 2>/dev/null; }
# The capacity key the scheduler reads follows too: 52 beside the Pod's 3g, less GPU 6's four.
for _ in $(seq 1 30); do [ "$(cap1g)" = 48 ] && break; sleep 1; done
echo "  node capacity nvidia.com/gpu.partitioned.mig-1g.10gb: $(cap1g) (want 48)"
[ "$(cap1g)" = 48 ] || failed=1
sleep 5
if grep -q MIG-hand-busy-on-the-rig "$HOST/mig-state.json"; then
  echo "  kept while busy, past the debounce"
else
  echo "  DESTROYED WHILE BUSY"; failed=1
fi
busy_4g false
for _ in $(seq 1 30); do grep -q MIG-hand-busy-on-the-rig "$HOST/mig-state.json" || break; sleep 1; done
if grep -q MIG-hand-busy-on-the-rig "$HOST/mig-state.json"; then
  echo "  its process ended: NOT destroyed"; failed=1
else
  echo "  its process ended: destroyed after the debounce"
fi
want 53 "  gone"
for _ in $(seq 1 30); do [ "$(cap1g)" = 52 ] && break; sleep 1; done
echo "  node capacity nvidia.com/gpu.partitioned.mig-1g.10gb: $(cap1g) (want 52)"
[ "$(cap1g)" = 52 ] || failed=1
$KC delete pod mig-pod --wait=true --timeout=60s >/dev/null 2>&1
want 56 "after the Pod is gone (reclaimed)"
grep -E " (WARN|ERROR) " /tmp/rig-mig-serve.log | grep -iE "partition|mig" | tail -8
verdict rig-mig
