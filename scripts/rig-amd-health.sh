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
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
K=/tmp/k8s
export KUBECONFIG=$K/kubeconfig
KC=$K/bin/kubectl
BIN=$(readlink -f "${BIN:-$REPO/target/$(uname -m)-unknown-linux-gnu/release/device-manager}")
[ -x "$BIN" ] || { echo "no binary $BIN (scripts/build-release.sh)"; exit 2; }
[ -x $K/up.sh ] || { echo "no rig at $K (run ../shared/rig/build.sh)"; exit 2; }
KUBECONFIG_SERVE=$K/kubeconfig

WORK=$(mktemp -d /tmp/rig-amd-health.XXXXXX)
KMSG=$WORK/kmsg
: >"$KMSG"
WITH_KCM=1 WITH_SCHED=1 $K/up.sh >"$WORK/up.log" 2>&1 && $K/node-up.sh >"$WORK/node.log" 2>&1 || {
  echo "rig did not come up ($WORK/*.log)"; exit 2; }
SERVE=
trap '[ -n "$SERVE" ] && kill $SERVE 2>/dev/null; $K/node-down.sh >/dev/null 2>&1; $K/down.sh >/dev/null 2>&1; rm -rf "$WORK"' EXIT
# The Devices CRD as this checkout defines it: Helm installs crds/ once and never upgrades them,
# and the API server drops status fields an older CRD does not know (deploy/README.md,
# "Upgrading"). Then what an earlier run left in etcd (the rig keeps its data).
$KC apply --server-side --force-conflicts -f "$REPO/deploy/helm/device-manager/crds/" >/dev/null
$KC delete devices.gpustack.ai rig-node --ignore-not-found >/dev/null 2>&1
$KC -n default delete events --field-selector involvedObject.kind=Node >/dev/null 2>&1
failed=0
fail() { echo "FAIL: $*"; failed=1; }

KUBECONFIG=$KUBECONFIG_SERVE "$BIN" serve --manufacturer amd --node-name rig-node \
  --host-root "$REPO/testdata/hosts/amd-8x-mi300x" \
  --kubelet-dir $K/kubelet --data-dir "$WORK/data" --kmsg-path "$KMSG" >"$WORK/serve.log" 2>&1 &
SERVE=$!
gpus() { $KC get node rig-node -o jsonpath='{.status.allocatable.amd\.com/gpu}' 2>/dev/null; }
kernel() {
  echo "kernel log <- $1"
  printf '3,%s,%s,-;%s\n' "$2" "$(($(date +%s) * 1000000))" "$1" >>"$KMSG"
}
for _ in $(seq 1 60); do [ "$(gpus)" = 8 ] && break; sleep 1; done
echo "before: allocatable amd.com/gpu: $(gpus)"
[ "$(gpus)" = 8 ] || fail "the eight boards were not served"
for _ in $(seq 1 30); do $KC get devices.gpustack.ai rig-node >/dev/null 2>&1 && break; sleep 1; done

kernel "amdgpu 0000:3d:00.0: amdgpu: [gfxhub0] no-retry page fault (src_id:0 ring:24 vmid:3 pasid:32769)" 900
kernel "amdgpu 0000:3d:00.0: amdgpu:  for process pt_main_thread pid 12924 thread pt_main_thread pid 12924)" 901
sleep 5
echo "after the page fault: allocatable amd.com/gpu: $(gpus)"
[ "$(gpus)" = 8 ] || fail "a page fault took a board out of service"

kernel "amdgpu 0000:1b:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!" 902
for _ in $(seq 1 60); do [ "$(gpus)" = 7 ] && break; sleep 1; done
echo "after the RAS error: allocatable amd.com/gpu: $(gpus)"
[ "$(gpus)" = 7 ] || fail "the board did not leave service"

faults=""
for _ in $(seq 1 30); do
  faults=$($KC get devices.gpustack.ai rig-node -o jsonpath='{.status.faults}' 2>/dev/null)
  echo "$faults" | grep -q AmdRasUncorrectable && echo "$faults" | grep -q AmdPageFault && break
  sleep 1
done
echo "Devices rig-node status.faults: $faults"
echo "$faults" | grep -q AmdRasUncorrectable || fail "the RAS error is not in the Devices status"
echo "$faults" | grep -q AmdPageFault || fail "the page fault is not in the Devices status"

events=""
for _ in $(seq 1 30); do
  events=$($KC -n default get events --field-selector involvedObject.kind=Node,involvedObject.name=rig-node \
    -o jsonpath='{range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}' 2>/dev/null)
  echo "$events" | grep -q Warning && break
  sleep 1
done
echo "Events on Node rig-node:"
echo "$events" | sed 's/^/  /'
echo "$events" | grep -q "^Warning AmdRasUncorrectable" || fail "no Warning Event on the Node naming the RAS error"
echo "$events" | grep -q "AmdPageFault" && fail "a Warning Event names the workload's page fault"

if [ "$failed" = 1 ]; then
  echo "the daemon's log (kernel log, fault, event lines):"
  grep -iE "kmsg|kernel log|amdgpu|fault|event" "$WORK/serve.log" | cut -c1-240 | sed 's/^/  /'
fi
if [ "$failed" = 0 ]; then echo "rig-amd-health: OK"; else echo "rig-amd-health: FAILED"; fi
exit $failed
