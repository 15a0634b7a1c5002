#!/usr/bin/env bash
# rig-xid.sh — a hardware XID reaches the cluster, on the rig's real kubelet (../shared/rig):
# `serve` on a copy of the recorded 8×H100 host, its kernel log a file this script writes
# (`--kmsg-path`, as the DaemonSet mounts the host's /dev/kmsg). After an XID 79 ("GPU has fallen
# off the bus") on GPU 0's bus:
#   - the kubelet takes the GPU out of service: allocatable nvidia.com/gpu goes from 8 to 7;
#   - the node's Devices object carries the fault in status.faults (code, class, driver text, time);
#   - a Warning Event on the Node says which GPU left service and why (`kubectl describe node`).
#
#   scripts/build-release.sh
#   scripts/rig-xid.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it: a person runs it and
# keeps what it printed. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
WORK=$(mktemp -d /tmp/rig-xid.XXXXXX)
KMSG=$WORK/kmsg
: >"$KMSG"
rig_up "$WORK/rig"
SERVE=
trap '[ -n "$SERVE" ] && kill $SERVE 2>/dev/null; rig_down; rm -rf "$WORK"' EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
fresh_devices

"$BIN" serve --node-name rig-node --host-root "$REPO/testdata/hosts/hgx-h100-8gpu" \
  --kubelet-dir $K/kubelet --data-dir "$WORK/data" --kmsg-path "$KMSG" >"$WORK/serve.log" 2>&1 &
SERVE=$!
gpus() { allocatable nvidia.com/gpu; }
for _ in $(seq 1 60); do [ "$(gpus)" = 8 ] && break; sleep 1; done
echo "before: allocatable nvidia.com/gpu: $(gpus)"
for _ in $(seq 1 30); do $KC get devices.gpustack.ai rig-node >/dev/null 2>&1 && break; sleep 1; done

kernel_line "$KMSG" 900 "NVRM: Xid (PCI:0000:18:00): 79, pid=2231, name=python3, GPU has fallen off the bus."

for _ in $(seq 1 60); do [ "$(gpus)" = 7 ] && break; sleep 1; done
echo "after: allocatable nvidia.com/gpu: $(gpus)"
[ "$(gpus)" = 7 ] || fail "the GPU did not leave service"

devices_faults 79
echo "$FAULTS" | grep -q 79 || fail "the XID is not in the Devices status"

node_events
echo "$EVENTS" | grep -q "^Warning .*79" || fail "no Warning Event on the Node naming XID 79"
echo "kubectl describe node rig-node (Events):"
$KC describe node rig-node | sed -n '/^Events:/,$p' | sed 's/^/  /' | head -8

if [ "$failed" = 1 ]; then
  echo "the daemon's log (kernel log, XID, fault, event lines):"
  grep -iE "kmsg|kernel log|xid|fault|event" "$WORK/serve.log" | cut -c1-240 | sed 's/^/  /'
fi
verdict rig-xid
