#!/usr/bin/env bash
# rig-rdma.sh — the node's RDMA device plugin (issue 31) on the rig's real kubelet and containerd
# (../shared/rig):
#   1. serve (NVIDIA's daemon) on a copy of testdata/hosts/hgx-h100-8gpu, whose network is 8
#      ConnectX-7 InfiniBand NICs (mlx5_0..7, one beside each GPU; scripts/make-rdma-hosts.py);
#   2. the verbs nodes the plugin injects (/dev/infiniband/uverbs0..7, /dev/infiniband/rdma_cm)
#      created on this machine as aliases of /dev/null (char 1:3) where absent, so containerd can
#      make them in the container — this machine has no RDMA NIC; removed again at the end;
#   3. the kubelet lists device.gpustack.ai/rdma (8), device.gpustack.ai/rdma.shared (512) and
#      registers device.gpustack.ai/rdma.partitioned (no VF: 0) as allocatable on rig-node;
#   4. Devices rig-node carries spec.interfaces (9: the 8 NICs and lo), and the NodeFeature the
#      rdma.capable / rdma.distance / rdma.numa labels;
#   5. a Pod of 1 device.gpustack.ai/rdma runs and sees exactly one /dev/infiniband/uverbs<N>,
#      /dev/infiniband/rdma_cm and NCCL_IB_HCA=mlx5_<N>;
#   6. a Pod of 2 device.gpustack.ai/rdma.shared: NCCL_IB_HCA names the devices of its nodes.
#
#   scripts/build-release.sh && scripts/rig-rdma.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"

WORK=$(mktemp -d /tmp/rig-rdma.XXXXXX)
HOST=$WORK/hgx-h100-8gpu
cp -a "$REPO/testdata/hosts/hgx-h100-8gpu" "$HOST"
made=()   # what this script created on the machine, removed at the end
made_dir=0
if [ ! -d /dev/infiniband ]; then mkdir -p /dev/infiniband; made_dir=1; fi
for n in $(cd "$HOST/root" && ls -d dev/infiniband/* | sed 's#^#/#'); do
  if [ ! -e "$n" ]; then
    mknod -m 0666 "$n" c 1 3
    made+=("$n")
  fi
done

rig_up "/tmp/rig-rdma"
fresh_devices
$KC apply -f "$RIGSRC/nfd-crds.yaml" >/dev/null   # the NodeFeature the rdma.* labels go to
$KC label node rig-node feature.node.kubernetes.io/pci-10de.present=true --overwrite >/dev/null
D=$WORK/data
MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --node-name rig-node \
  --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" \
  --monitor-period 1s >/tmp/rig-rdma-serve.log 2>&1 &
SERVE=$!
stop() {
  kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null
  $KC delete pod --all --wait=false >/dev/null 2>&1
  rig_down
  for m in "${made[@]}"; do rm -f "$m"; done
  [ "$made_dir" = 1 ] && rmdir /dev/infiniband 2>/dev/null
  rm -rf "$WORK"
}
trap stop EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up

for _ in $(seq 1 90); do [ "$(allocatable device.gpustack.ai/rdma)" = 8 ] && break; sleep 1; done
echo "allocatable: device.gpustack.ai/rdma $(allocatable device.gpustack.ai/rdma), .rdma.shared $(allocatable device.gpustack.ai/rdma.shared), .rdma.partitioned $(allocatable device.gpustack.ai/rdma.partitioned)"
[ "$(allocatable device.gpustack.ai/rdma)" = 8 ] || fail "device.gpustack.ai/rdma is not 8 on rig-node"
[ "$(allocatable device.gpustack.ai/rdma.shared)" = 512 ] || fail "device.gpustack.ai/rdma.shared is not 512"
[ -S $K/kubelet/device-plugins/rdma.exclusive.sock ] && [ -e $K/kubelet/device-plugins/gpustack-rdma.lock ] \
  || fail "serve never took the node's RDMA lock (no rdma.exclusive.sock beside gpustack-rdma.lock)"

names=""
for _ in $(seq 1 30); do
  names=$($KC get devices.gpustack.ai rig-node -o jsonpath='{.spec.interfaces[*].name}' 2>/dev/null)
  [ "$(echo "$names" | wc -w)" = 9 ] && break
  sleep 1
done
echo "Devices rig-node spec.interfaces: $names"
[ "$(echo "$names" | wc -w)" = 9 ] || fail "spec.interfaces does not list the 8 NICs and lo (an old CRD prunes it: deploy/README.md)"
link=$($KC get devices.gpustack.ai rig-node -o jsonpath='{.spec.interfaces[?(@.name=="ibp25s0")].link.state}' 2>/dev/null)
[ "$link" = ok ] || fail "ibp25s0's link is '$link', not ok"
labels=$($KC get nodefeature -n default rig-node-gpustack-device-manager -o jsonpath='{.spec.labels}' 2>/dev/null)
echo "NodeFeature labels: $labels"
echo "$labels" | grep -q '"feature.gpustack.ai/rdma.capable":"true"' || fail "no rdma.capable label"
echo "$labels" | grep -q '"feature.gpustack.ai/rdma.distance":"PXB"' || fail "rdma.distance is not PXB"
echo "$labels" | grep -q '"feature.gpustack.ai/rdma.numa":"0_1"' || fail "rdma.numa is not 0_1"

pod() { # name limits -> runs it, prints what its container saw
  busybox_pod "$1" 'ls /dev/infiniband/ | tr "\n" " "; echo; env | grep -E "^NCCL_IB_HCA=" ; sleep 3600' "$2"
  saw "$1"
}

pod rdma-one '{device.gpustack.ai/rdma: "1"}'
expect rdma-one "one uverbs node" 'uverbs[0-7]' 1
expect rdma-one "rdma_cm" 'rdma_cm' 1
expect rdma-one "NCCL_IB_HCA names one mlx5 device" '^NCCL_IB_HCA=mlx5_[0-7]$' 1
pod rdma-shared '{device.gpustack.ai/rdma.shared: "2"}'
expect rdma-shared "rdma_cm" 'rdma_cm' 1
expect rdma-shared "NCCL_IB_HCA" '^NCCL_IB_HCA=mlx5_[0-7](,mlx5_[0-7])?$' 1
$KC delete pod rdma-one rdma-shared --wait=true --timeout=60s >/dev/null 2>&1

if [ "$failed" = 0 ]; then echo "rig-rdma: OK"; else echo "rig-rdma: FAILED (serve's log: /tmp/rig-rdma-serve.log)"; fi
exit $failed
