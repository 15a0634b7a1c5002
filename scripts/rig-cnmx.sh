#!/usr/bin/env bash
# rig-cnmx.sh — Cambricon and MetaX whole cards (issue 30) on the rig's real kubelet and
# containerd (../shared/rig), one manufacturer after the other:
#   1. serve --manufacturer cambricon on a copy of testdata/hosts/cambricon-8x-mlu370-cnmon-v5
#      (cnmon replayed from the recording); the node advertises 8 cambricon.com/mlu;
#   2. a Pod of 2 cambricon.com/mlu: its container sees exactly two /dev/cambricon_dev<N> card
#      nodes, their cambricon_ipcm<N> and cmsg_ctrl<N>, /dev/cambricon_ctl, and
#      CAMBRICON_VISIBLE_DEVICES naming the two driver indexes;
#   3. serve --manufacturer metax on a copy of testdata/hosts/metax-8x-c500; 8 metax-tech.com/gpu;
#   4. a Pod of 2 metax-tech.com/gpu: /dev/mxcd, /dev/mxnd, /dev/mxgd, two card and two render
#      nodes, and no METAX_* or *_VISIBLE_DEVICES variable;
#   5. a Pod of one metax-tech.com/gpu.sliced (50 % memory, 60 % cores): /dev/mxcd and one
#      render node only, METAX_SGPUS naming subdevice #0 of its card with compute=60 and
#      vram=32768, and the recording's driver (RecordedSgpu) showing sgpu/sgpu0; the Pod
#      deleted, the subdevice is destroyed within the reclaim passes (3 passes: its deletion's
#      reconcile and the 60 s ticker).
#   The device nodes the responders name are created on this machine as aliases of /dev/null
#   (char 1:3) where absent — this machine has no MLU or MetaX GPU — and removed at the end.
#
#   scripts/build-release.sh && scripts/rig-cnmx.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"

WORK=$(mktemp -d /tmp/rig-cnmx.XXXXXX)
made=()   # device nodes this script created on the machine, removed at the end
SERVE=
stop_serve() {
  [ -n "$SERVE" ] && { kill "$SERVE" 2>/dev/null; wait "$SERVE" 2>/dev/null; }
  SERVE=
  $KC delete pod --all --wait=false >/dev/null 2>&1
  rig_down
}
cleanup() {
  stop_serve
  for m in "${made[@]}"; do rm -f "$m"; done
  rmdir /dev/dri 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up

# Aliases of /dev/null for the recorded host's device nodes (its root's dev/ marker files).
alias_nodes() { # host-copy
  local n
  mkdir -p /dev/dri
  for n in $(cd "$1/root" && find dev -type f | sed 's#^#/#'); do
    if [ ! -e "$n" ]; then
      mknod -m 0666 "$n" c 1 3
      made+=("$n")
    fi
  done
}

alloc() { $KC get node rig-node -o jsonpath="{.status.allocatable.${1//./\\.}}" 2>/dev/null; }

serve() { # manufacturer host-name resource
  local host=$WORK/$2
  cp -a "$REPO/testdata/hosts/$2" "$host"
  alias_nodes "$host"
  rig_up "/tmp/rig-cnmx-$1"
  MALLOC_ARENA_MAX=1 "$BIN" serve --manufacturer "$1" --node-name rig-node \
    --host-root "$host" --kubelet-dir $K/kubelet --data-dir "$WORK/data-$1" \
    >"/tmp/rig-cnmx-$1-serve.log" 2>&1 &
  SERVE=$!
  for _ in $(seq 1 90); do [ "$(alloc "$3")" = 8 ] && break; sleep 1; done
  echo "$1 allocatable: $3 $(alloc "$3"), $3.shared $(alloc "$3.shared")"
  [ "$(alloc "$3")" = 8 ] || { echo "  WRONG: $3 is not 8"; failed=1; }
  $KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1
}

pod() { # name limits(yaml flow) -> runs it, prints what its container saw
  busybox_pod "$1" 'ls /dev | tr "\n" " "; echo; ls /dev/dri 2>/dev/null | tr "\n" " "; echo; env | grep -E "^(CAMBRICON_|METAX_|MLU_|VIRTUAL_|[A-Z_]*VISIBLE_DEVICES)" | sort; sleep 3600' "$2"
  saw "$1"
}
EXPECT_BY=words   # expect (rig-lib.sh) counts words

echo "=== cambricon"
serve cambricon cambricon-8x-mlu370-cnmon-v5 cambricon.com/mlu
pod mlu-exclusive '{cambricon.com/mlu: "2"}'
expect mlu-exclusive "two card nodes" '^cambricon_dev[0-9]+$' 2
expect mlu-exclusive "their IPC nodes" '^cambricon_ipcm[0-9]+$' 2
expect mlu-exclusive "their message control nodes" '^cmsg_ctrl[0-9]+$' 2
expect mlu-exclusive "the control node once" '^cambricon_ctl$' 1
expect mlu-exclusive "CAMBRICON_VISIBLE_DEVICES names two driver indexes" '^CAMBRICON_VISIBLE_DEVICES=[0-9]+,[0-9]+$'
$KC delete pod mlu-exclusive --wait=true --timeout=60s >/dev/null 2>&1
stop_serve

echo "=== metax"
serve metax metax-8x-c500 metax-tech.com/gpu
pod mx-exclusive '{metax-tech.com/gpu: "2"}'
expect mx-exclusive "the three control nodes" '^mx[cng]d$' 3
expect mx-exclusive "two card nodes" '^card[0-9]+$' 2
expect mx-exclusive "two render nodes" '^renderD[0-9]+$' 2
expect mx-exclusive "no variable of MetaX's or any visibility variable" '^[A-Z_]+=' 0
$KC delete pod mx-exclusive --wait=true --timeout=60s >/dev/null 2>&1
echo "metax-tech.com/gpu.sliced allocatable: $(alloc metax-tech.com/gpu.sliced)"
[ "$(alloc metax-tech.com/gpu.sliced)" = 128 ] || { echo "  WRONG: metax-tech.com/gpu.sliced is not 16 a card"; failed=1; }
pod mx-sliced '{metax-tech.com/gpu.sliced: "1", metax-tech.com/gpu.sliced.memory-percentage: "50", metax-tech.com/gpu.sliced.cores-percentage: "60", metax-tech.com/gpu.sliced.units: "800000"}'
expect mx-sliced "/dev/mxcd only of the control nodes" '^mx[cng]d$' 1
expect mx-sliced "no card node" '^card[0-9]+$' 0
expect mx-sliced "one render node" '^renderD[0-9]+$' 1
expect mx-sliced "METAX_SGPUS naming subdevice #0, 60 % compute, 32768 MiB, the Pod's alias" '^METAX_SGPUS=sgpu=0000:[0-9a-f]{2}:00\.0#0;compute=60;vram=32768;alias=gpustack-[0-9a-f-]+$'
subdevices() { ls -d "$WORK"/metax-8x-c500/root/sys/bus/pci/devices/*/sgpu/sgpu[0-9]* 2>/dev/null | wc -l; }
echo "  subdevices the recording's driver shows: $(subdevices)"
[ "$(subdevices)" = 1 ] || { echo "  WRONG: one subdevice expected"; failed=1; }
$KC delete pod mx-sliced --wait=true --timeout=60s >/dev/null 2>&1
for _ in $(seq 1 200); do [ "$(subdevices)" = 0 ] && break; sleep 1; done
echo "  after the Pod was deleted: $(subdevices) subdevice(s)"
[ "$(subdevices)" = 0 ] || { echo "  WRONG: the subdevice was not reclaimed"; failed=1; }
stop_serve

if [ "$failed" = 0 ]; then echo "rig-cnmx: OK"; else echo "rig-cnmx: FAILED (serve's logs: /tmp/rig-cnmx-*-serve.log)"; fi
exit $failed
