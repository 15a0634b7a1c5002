#!/usr/bin/env bash
# rig-cores-overcommit.sh — issue 44 item 3 on the rig's real scheduler, kubelet and containerd
# (../shared/rig): the compute the node advertises is the compute Allocate grants. Hygon's CU
# masks are disjoint (spec/hygon.md §1.5: `coresPercentageOvercommit` false), so one DCU's slices
# hold at most 100 % of its cores between them and the node's hygon.com/dcu.sliced.cores-percentage
# is 100 a DCU, not 100 a slot (400, not 1600, on four DCUs):
#   1. serve --manufacturer hygon on a copy of testdata/hosts/hygon-4x-k100ai (4× K100_AI, 120 CU
#      and 65520 MiB each, not in MIG mode; device nodes as /dev/null aliases and /opt/hyhal,
#      /opt/dtk made where absent, all removed at the end, as scripts/rig-hygon.sh does): the node
#      advertises hygon.com/dcu.sliced.cores-percentage 400, and the Devices object says
#      logicalSliced.coresPercentageOvercommit false for each DCU;
#   2. the cores capacity filled with sliced Pods, each waited for before the next: three of 100 %
#      cores and 100 % memory (one a DCU: a full DCU takes no more), then one of 100 % cores and
#      50 % memory, which leaves VRAM (50 %) and slots (3) on the fourth DCU but none of its CUs;
#      each runs, on its own DCU (its vdev0.conf names four PciBusIds);
#   3. one more slice (10 % cores, 10 % memory): its VRAM, units and slot are still free on the node,
#      its compute is not. It must stay Pending, PodScheduled False with the scheduler's
#      `Insufficient hygon.com/dcu.sliced.cores-percentage` (and no other key short), never bound,
#      never failed by the kubelet (UnexpectedAdmissionError: the kubelet's Allocate refused with
#      "allocate vdev for card …: insufficient free compute units", which is what the node's old
#      capacity of 1600 let through);
#   4. the half-memory Pod and the Pending one deleted, the same slice asked again once the
#      fourth DCU's vdev.conf is reclaimed: it runs, on that DCU.
#
# The fill is shaped so that no DCU runs out of CUs while it still fits by VRAM before the last
# fill Pod: slices pack onto the most-used DCU whose VRAM fits, and the ledger does not count CUs
# (the ignored scenario in crates/accel-plugin/tests/hygon_scenarios.rs), so a fill of, say,
# 100 % cores and 25 % memory would have its second Pod sent to the first DCU and refused there.
#
#   scripts/build-release.sh && scripts/rig-cores-overcommit.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it: a person runs it and
# keeps what it printed. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
CORES=hygon.com/dcu.sliced.cores-percentage

WORK=$(mktemp -d /tmp/rig-cores-overcommit.XXXXXX)
HOST=$WORK/hygon-4x-k100ai
cp -a "$REPO/testdata/hosts/hygon-4x-k100ai" "$HOST"
made=()      # device nodes and files this script created on the machine, removed at the end
made_dirs=() # directories it created, removed at the end (deepest first)
hygon_machine "$HOST"

rig_up "/tmp/rig-cores-overcommit"
fresh_devices
D=$WORK/data
MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --manufacturer hygon --node-name rig-node \
  --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" >/tmp/rig-cores-overcommit-serve.log 2>&1 &
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
for _ in $(seq 1 90); do [ -n "$(allocatable $CORES)" ] && [ -n "$(allocatable hygon.com/dcu.sliced)" ] && break; sleep 1; done
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1

echo "=== 1. the node's compute"
for key in hygon.com/dcu.sliced $CORES hygon.com/dcu.sliced.memory-percentage hygon.com/dcu.sliced.units; do
  echo "allocatable $key: $(allocatable $key)"
done
if [ "$(allocatable $CORES)" = 400 ]; then
  echo "  ok: $CORES is 400 (100 a DCU)"
else
  fail "$CORES is $(allocatable $CORES), not 400 (1600 is 100 a slot: compute Allocate cannot grant)"
fi
flags=""
for _ in $(seq 1 30); do
  flags=$($KC get devices.gpustack.ai rig-node -o jsonpath='{.spec.groups[*].accelerators[*].logicalSliced.coresPercentageOvercommit}' 2>/dev/null)
  [ -n "$flags" ] && break
  sleep 1
done
echo "Devices rig-node logicalSliced.coresPercentageOvercommit: $flags"
[ "$flags" = "false false false false" ] && echo "  ok: false for each DCU" || fail "not false for each of the four DCUs"

slice() { # memory% cores%: a sliced request as the webhook would leave it (.units folded)
  echo "{hygon.com/dcu.sliced: \"1\", hygon.com/dcu.sliced.memory-percentage: \"$1\", $CORES: \"$2\", hygon.com/dcu.sliced.units: \"$(($1 * 16000))\"}"
}
tenant() { # name memory% cores%
  busybox_pod "$1" 'cat /etc/vdev/docker/vdev0.conf; sleep 3600' "$(slice "$2" "$3")"
}
bus() { $KC logs "$1" 2>/dev/null | sed -n 's/^PciBusId: //p'; }

echo "=== 2. the cores capacity filled: three DCUs whole, the fourth's CUs with half its VRAM"
for spec in "fill-1 100 100" "fill-2 100 100" "fill-3 100 100" "fill-4 50 100"; do
  set -- $spec
  tenant "$1" "$2" "$3"
  running "$1" 90 && echo "  $1 ($2 % memory, $3 % cores): Running on $(bus "$1")"
done
busids=$(for p in fill-1 fill-2 fill-3 fill-4; do bus $p; done | sort -u | wc -l)
[ "$busids" = 4 ] && echo "  ok: one DCU each" || fail "the four fill Pods are on $busids DCUs, not 4"

echo "=== 3. one more slice: 10 % memory, 10 % cores"
tenant one-more 10 10
scheduled="" message="" node="" reason=""
for _ in $(seq 1 30); do
  scheduled=$($KC get pod one-more -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].status}' 2>/dev/null)
  message=$($KC get pod one-more -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' 2>/dev/null)
  [ "$scheduled" = False ] && [ -n "$message" ] && break
  sleep 1
done
sleep 10 # a Pod the scheduler would bind is bound by now
node=$($KC get pod one-more -o jsonpath='{.spec.nodeName}' 2>/dev/null)
reason=$($KC get pod one-more -o jsonpath='{.status.phase} {.status.reason}' 2>/dev/null)
echo "one-more: $reason, PodScheduled $scheduled: $message"
$KC get events --field-selector involvedObject.name=one-more \
  -o jsonpath='{range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}' 2>/dev/null | sed 's/^/  event: /'
if [ -z "$node" ] && [ "$scheduled" = False ] && echo "$message" | grep -q "Insufficient $CORES"; then
  echo "  ok: Pending, the scheduler's reason Insufficient $CORES"
else
  fail "one-more is not kept Pending for its compute (node '${node}', PodScheduled '${scheduled}')"
fi
short=$(echo "$message" | grep -oE 'Insufficient [^ ,]+' | sed 's/[.,]$//' | sort -u | tr '\n' ' ')
if [ "$short" = "Insufficient $CORES " ]; then
  echo "  ok: VRAM, units and slots were free; compute alone kept it off"
else
  fail "the scheduler found short: ${short:-nothing} (compute alone should be)"
fi
case "$reason" in
  *UnexpectedAdmissionError*) fail "the kubelet failed it: UnexpectedAdmissionError (Allocate refused what the scheduler placed)" ;;
  *) echo "  ok: never UnexpectedAdmissionError" ;;
esac

echo "=== 4. the half-memory Pod gone: the same slice runs, on the fourth DCU"
# Asked again once fill-4's vdev.conf is reclaimed (the files are Hygon's CU ledger), so the
# kubelet's Allocate cannot race the reclaim.
fourth=$(bus fill-4)
$KC delete pod one-more fill-4 --wait=true --timeout=60s >/dev/null 2>&1
for _ in $(seq 1 30); do [ "$(find "$D" -name 'vdev*.conf' | wc -l)" = 3 ] && break; sleep 1; done
tenant one-more 10 10
if running one-more 90; then
  echo "  one-more: Running on $(bus one-more)"
  [ "$(bus one-more)" = "$fourth" ] && echo "  ok: on the DCU fill-4 left" || fail "one-more is on $(bus one-more), not $fourth"
fi

[ "$failed" = 0 ] || echo "serve's log: /tmp/rig-cores-overcommit-serve.log"
verdict rig-cores-overcommit
