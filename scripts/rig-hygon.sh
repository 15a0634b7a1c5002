#!/usr/bin/env bash
# rig-hygon.sh — Hygon's families (issue 26) on the rig's real kubelet and containerd (../shared/rig):
#   1. serve --manufacturer hygon on a copy of testdata/hosts/hygon-4x-k100ai (4× K100_AI, not in
#      MIG mode): the node registers hygon.com/dcu: 4 (and .shared, .sliced);
#   2. the device nodes the responder names (/dev/kfd, /dev/mkfd, /dev/dri/card1..4,
#      /dev/dri/renderD128..131) created on this machine as aliases of /dev/null (char 1:3) where
#      absent, and /opt/hyhal, /opt/dtk made as empty directories where absent (the responder
#      bind-mounts them) — this machine has no DCU; all removed again at the end;
#   3. a Pod of 1 hygon.com/dcu runs with /dev/kfd, /dev/mkfd, one card and one render node and
#      /opt/hyhal, and no HYGON/DMI variable;
#   4. a Pod of 2 hygon.com/dcu.shared: /dev/kfd and two card and two render nodes;
#   5. two Pods of one hygon.com/dcu.sliced (50 % memory, 50 % cores) each read their
#      /etc/vdev/docker/vdev0.conf (read-only): one PciBusId, cu_count 60, distinct pipe_id and
#      vdev_id; /opt/hygondriver is mounted; the files are gone from the data dir after the Pods;
#   6. churn: N Pods of 1 hygon.com/dcu one after another, none rejected.
#
#   scripts/build-release.sh && N=30 scripts/rig-hygon.sh
#
# The MIG host (testdata/hosts/hygon-8x-bw150-mig) and its partitions: scripts/rig-hygon-mig.sh.
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
N=${N:-30}

WORK=$(mktemp -d /tmp/rig-hygon.XXXXXX)
HOST=$WORK/hygon-4x-k100ai
cp -a "$REPO/testdata/hosts/hygon-4x-k100ai" "$HOST"
made=()      # device nodes and files this script created on the machine, removed at the end
made_dirs=() # directories it created, removed at the end (deepest first)
hygon_machine "$HOST"

rig_up "/tmp/rig-hygon"
fresh_devices
D=$WORK/data
MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --manufacturer hygon --node-name rig-node \
  --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" >/tmp/rig-hygon-serve.log 2>&1 &
SERVE=$!
stop() {
  kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null
  $KC delete pod --all --wait=false >/dev/null 2>&1
  rig_down
  for m in "${made[@]}"; do rm -f "$m"; done
  for d in "${made_dirs[@]}"; do rmdir "$d" 2>/dev/null; done
  rmdir /dev/dri 2>/dev/null
  rm -rf "$WORK"
}
trap stop EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
for _ in $(seq 1 90); do [ "$(allocatable hygon.com/dcu)" = 4 ] && [ -n "$(allocatable hygon.com/dcu.sliced)" ] && break; sleep 1; done
echo "allocatable: hygon.com/dcu $(allocatable hygon.com/dcu), hygon.com/dcu.shared $(allocatable hygon.com/dcu.shared), hygon.com/dcu.sliced $(allocatable hygon.com/dcu.sliced)"
[ "$(allocatable hygon.com/dcu)" = 4 ] || fail "hygon.com/dcu is not 4"
[ -n "$(allocatable hygon.com/dcu.sliced)" ] || fail "no hygon.com/dcu.sliced"
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1

pod() { # name limits(yaml flow) -> runs it, prints what its container saw
  busybox_pod "$1" 'ls /dev/kfd /dev/mkfd /dev/dri/ | tr "\n" " "; echo; env | grep -E "^(HYGON|DMI_|HIP_|ROCR_|HSA_)" | sort; for d in /opt/hyhal /opt/hygondriver; do [ -d $d ] && echo mounted $d; done; [ -e /etc/vdev/docker/vdev0.conf ] && cat /etc/vdev/docker/vdev0.conf; touch /etc/vdev/docker/x 2>/dev/null && echo ledger-writable; sleep 3600' "$2"
  saw "$1"
}
conf() { $KC logs "$1" 2>/dev/null | sed -n "s/^$2: //p"; }

pod hygon-exclusive '{hygon.com/dcu: "1"}'
expect hygon-exclusive "/dev/kfd" '^/dev/kfd'
expect hygon-exclusive "/dev/mkfd" '/dev/mkfd'
expect hygon-exclusive "one card node" 'card[0-9]+' 1
expect hygon-exclusive "one render node" 'renderD[0-9]+' 1
expect hygon-exclusive "/opt/hyhal mounted" '^mounted /opt/hyhal$'
expect hygon-exclusive "no injected variable" '^(HYGON|DMI_|HIP_|ROCR_|HSA_)' 0
pod hygon-shared '{hygon.com/dcu.shared: "2"}'
expect hygon-shared "two card nodes" 'card[0-9]+' 2
expect hygon-shared "two render nodes" 'renderD[0-9]+' 2
$KC delete pod hygon-exclusive hygon-shared --wait=true --timeout=60s >/dev/null 2>&1

SLICE='{hygon.com/dcu.sliced: "1", hygon.com/dcu.sliced.memory-percentage: "50", hygon.com/dcu.sliced.cores-percentage: "50", hygon.com/dcu.sliced.units: "800000"}'
pod hygon-slice-a "$SLICE"
pod hygon-slice-b "$SLICE"
for p in hygon-slice-a hygon-slice-b; do
  expect $p "vdev0.conf names a PciBusId" '^PciBusId: [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$'
  expect $p "two cu_mask lines" '^cu_mask: 0x[0-9a-f]{16}$' 2
  expect $p "cu_count 60 (half of 120)" '^cu_count: 60$'
  expect $p "/opt/hygondriver mounted" '^mounted /opt/hygondriver$'
  expect $p "the ledger is read-only" '^ledger-writable$' 0
done
if [ "$(conf hygon-slice-a pipe_id)" != "$(conf hygon-slice-b pipe_id)" ] && [ "$(conf hygon-slice-a vdev_id)" != "$(conf hygon-slice-b vdev_id)" ]; then
  echo "  ok: distinct pipe_id and vdev_id ($(conf hygon-slice-a pipe_id)/$(conf hygon-slice-b pipe_id))"
else
  fail "the two slices share a pipe_id or vdev_id"
fi
echo "ledger files: $(find "$D" -name 'vdev*.conf' | wc -l)"
$KC delete pod hygon-slice-a hygon-slice-b --wait=true --timeout=60s >/dev/null 2>&1
for _ in $(seq 1 30); do [ "$(find "$D" -name 'vdev*.conf' | wc -l)" = 0 ] && break; sleep 1; done
[ "$(find "$D" -name 'vdev*.conf' | wc -l)" = 0 ] && echo "  ok: the slices' vdev.conf files went with their Pods" || fail "vdev.conf files left after the Pods"

echo "=== churn: $N Pods of 1 hygon.com/dcu"
rejected=0
for i in $(seq 1 "$N"); do
  busybox_pod "hygon-churn-$i" 'sleep 3600' '{hygon.com/dcu: "1"}'
  if ! $KC wait --for=condition=Ready "pod/hygon-churn-$i" --timeout=60s >/dev/null 2>&1; then
    echo "  hygon-churn-$i rejected: $($KC get pod "hygon-churn-$i" -o jsonpath='{.status.reason}: {.status.message}')"
    rejected=$((rejected + 1))
  fi
  $KC delete pod "hygon-churn-$i" --wait=true --timeout=60s >/dev/null
done
echo "hygon.com/dcu: $N Pods, $rejected rejected"
[ "$rejected" = 0 ] || failed=1

[ "$failed" = 0 ] || echo "serve's log: /tmp/rig-hygon-serve.log"
verdict rig-hygon
