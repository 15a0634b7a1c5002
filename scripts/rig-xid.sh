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
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
K=/tmp/k8s
export KUBECONFIG=$K/kubeconfig
KC=$K/bin/kubectl
BIN=$(readlink -f "${BIN:-$REPO/target/$(uname -m)-unknown-linux-gnu/release/device-manager}")
[ -x "$BIN" ] || { echo "no binary $BIN (scripts/build-release.sh)"; exit 2; }
[ -x $K/up.sh ] || { echo "no rig at $K (run ../shared/rig/build.sh)"; exit 2; }
KUBECONFIG_SERVE=$K/kubeconfig

WORK=$(mktemp -d /tmp/rig-xid.XXXXXX)
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

KUBECONFIG=$KUBECONFIG_SERVE "$BIN" serve --node-name rig-node --host-root "$REPO/testdata/hosts/hgx-h100-8gpu" \
  --kubelet-dir $K/kubelet --data-dir "$WORK/data" --kmsg-path "$KMSG" >"$WORK/serve.log" 2>&1 &
SERVE=$!
gpus() { $KC get node rig-node -o jsonpath='{.status.allocatable.nvidia\.com/gpu}' 2>/dev/null; }
for _ in $(seq 1 60); do [ "$(gpus)" = 8 ] && break; sleep 1; done
echo "before: allocatable nvidia.com/gpu: $(gpus)"
for _ in $(seq 1 30); do $KC get devices.gpustack.ai rig-node >/dev/null 2>&1 && break; sleep 1; done

line="NVRM: Xid (PCI:0000:18:00): 79, pid=2231, name=python3, GPU has fallen off the bus."
echo "kernel log <- $line"
printf '3,900,%s,-;%s\n' "$(($(date +%s) * 1000000))" "$line" >>"$KMSG"

for _ in $(seq 1 60); do [ "$(gpus)" = 7 ] && break; sleep 1; done
echo "after: allocatable nvidia.com/gpu: $(gpus)"
[ "$(gpus)" = 7 ] || fail "the GPU did not leave service"

faults=""
for _ in $(seq 1 30); do
  faults=$($KC get devices.gpustack.ai rig-node -o jsonpath='{.status.faults}' 2>/dev/null)
  echo "$faults" | grep -q 79 && break
  sleep 1
done
echo "Devices rig-node status.faults: $faults"
echo "$faults" | grep -q 79 || fail "the XID is not in the Devices status"

events=""
for _ in $(seq 1 30); do
  events=$($KC -n default get events --field-selector involvedObject.kind=Node,involvedObject.name=rig-node \
    -o jsonpath='{range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}' 2>/dev/null)
  echo "$events" | grep -q Warning && break
  sleep 1
done
echo "Events on Node rig-node:"
echo "$events" | sed 's/^/  /'
echo "$events" | grep -q "^Warning .*79" || fail "no Warning Event on the Node naming XID 79"
echo "kubectl describe node rig-node (Events):"
$KC describe node rig-node | sed -n '/^Events:/,$p' | sed 's/^/  /' | head -8

if [ "$failed" = 1 ]; then
  echo "the daemon's log (kernel log, XID, fault, event lines):"
  grep -iE "kmsg|kernel log|xid|fault|event" "$WORK/serve.log" | cut -c1-240 | sed 's/^/  /'
fi
if [ "$failed" = 0 ]; then echo "rig-xid: OK"; else echo "rig-xid: FAILED"; fi
exit $failed
