#!/usr/bin/env bash
# rig-amd-health.sh — amdgpu faults reach the cluster, on the rig's real kubelet (../shared/rig),
# with no AMD hardware: `serve --manufacturer amd` on a copy of the recorded 8× MI300X host (its
# /dev/kfd and /dev/dri nodes are marker files under the recorded root, which is where the AMD
# responder looks), its kernel log a file this script writes (`--kmsg-path`, as the DaemonSet
# mounts the host's /dev/kmsg). Then:
#   - a page fault on board 1 is the workload's: allocatable amd.com/gpu stays 8, the Devices
#     status carries AmdPageFault (class application), no Warning Event names it;
#   - an uncorrectable RAS error on board 0 takes it out of service: allocatable goes to 7, the
#     Devices status carries AmdRasUncorrectable (class hardware), a Warning Event names it.
#
#   scripts/build-release.sh
#   scripts/rig-amd-health.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it: a person runs it and
# keeps what it printed. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
WORK=$(mktemp -d /tmp/rig-amd-health.XXXXXX)
KMSG=$WORK/kmsg
: >"$KMSG"
rig_up "$WORK/rig"
SERVE=
trap '[ -n "$SERVE" ] && kill $SERVE 2>/dev/null; rig_down; rm -rf "$WORK"' EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
fresh_devices

"$BIN" serve --manufacturer amd --node-name rig-node \
  --host-root "$REPO/testdata/hosts/amd-8x-mi300x" \
  --kubelet-dir $K/kubelet --data-dir "$WORK/data" --kmsg-path "$KMSG" >"$WORK/serve.log" 2>&1 &
SERVE=$!
gpus() { allocatable amd.com/gpu; }
for _ in $(seq 1 60); do [ "$(gpus)" = 8 ] && break; sleep 1; done
echo "before: allocatable amd.com/gpu: $(gpus)"
[ "$(gpus)" = 8 ] || fail "the eight boards were not served"
for _ in $(seq 1 30); do $KC get devices.gpustack.ai rig-node >/dev/null 2>&1 && break; sleep 1; done

kernel_line "$KMSG" 900 "amdgpu 0000:3d:00.0: amdgpu: [gfxhub0] no-retry page fault (src_id:0 ring:24 vmid:3 pasid:32769)"
kernel_line "$KMSG" 901 "amdgpu 0000:3d:00.0: amdgpu:  for process pt_main_thread pid 12924 thread pt_main_thread pid 12924)"
sleep 5
echo "after the page fault: allocatable amd.com/gpu: $(gpus)"
[ "$(gpus)" = 8 ] || fail "a page fault took a board out of service"

kernel_line "$KMSG" 902 "amdgpu 0000:1b:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!"
for _ in $(seq 1 60); do [ "$(gpus)" = 7 ] && break; sleep 1; done
echo "after the RAS error: allocatable amd.com/gpu: $(gpus)"
[ "$(gpus)" = 7 ] || fail "the board did not leave service"

devices_faults AmdRasUncorrectable AmdPageFault
echo "$FAULTS" | grep -q AmdRasUncorrectable || fail "the RAS error is not in the Devices status"
echo "$FAULTS" | grep -q AmdPageFault || fail "the page fault is not in the Devices status"

node_events
echo "$EVENTS" | grep -q "^Warning AmdRasUncorrectable" || fail "no Warning Event on the Node naming the RAS error"
echo "$EVENTS" | grep -q "AmdPageFault" && fail "a Warning Event names the workload's page fault"

if [ "$failed" = 1 ]; then
  echo "the daemon's log (kernel log, fault, event lines):"
  grep -iE "kmsg|kernel log|amdgpu|fault|event" "$WORK/serve.log" | cut -c1-240 | sed 's/^/  /'
fi
verdict rig-amd-health
