#!/usr/bin/env bash
# rig-thead.sh — T-Head's families (issue 28) on the rig's real kubelet and containerd (../shared/rig):
#   1. serve --manufacturer thead on a copy of testdata/hosts/thead-16x-zw810e, with stand-in
#      HGGC shims, ppu-monitor and the ld.so.preload naming the pair staged in the copy's
#      <library-dir>/thead/ and at the same absolute path on this machine (so the kubelet's bind
#      mounts resolve);
#   2. the device nodes the responder names (/dev/alixpu, /dev/alixpu_ctl, /dev/alixpu_ppu0-15)
#      created on this machine where absent, each with the major:minor its marker in the
#      recorded host carries (`c 509:1` …): the responder proves every card's node by the minor
#      `ppu-smi -q` recorded, reading the recording's markers, and the container then sees the
#      same numbers (card 0 is minor 1: /dev/alixpu holds minor 0). No driver owns those majors
#      here (checked in /proc/devices first), so opening one fails ENXIO; nothing opens them.
#      Removed again at the end;
#   3. a Pod of 2 alibabacloud.com/ppu: its container sees /dev/alixpu, /dev/alixpu_ctl and
#      exactly two /dev/alixpu_ppu<N> nodes whose minors are N+1, and no HGGC_ variable;
#   4. a Pod of 1 alibabacloud.com/ppu.shared: the two control nodes and one card node;
#   5. a Pod of one alibabacloud.com/ppu.sliced (25 % memory): HGGC_DEVICE_SM_LIMIT=100,
#      HGGC_DEVICE_MEMORY_LIMIT_0=24576, HGGC_LEDGER_PATH, LIBHGGC_LOG_LEVEL=1, the shim pair and
#      ppu-monitor mounted, /etc/ld.so.preload naming the pair, /var/run/vppu writable;
#   6. churn: N Pods of 1 alibabacloud.com/ppu one after another, none rejected.
#
#   scripts/build-release.sh && N=30 scripts/rig-thead.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
N=${N:-30}

WORK=$(mktemp -d /tmp/rig-thead.XXXXXX)
HOST=$WORK/thead-16x-zw810e
cp -a "$REPO/testdata/hosts/thead-16x-zw810e" "$HOST"
LIBDIR=/var/lib/gpustack/operator/lib/thead
made=()   # what this script created on the machine, removed at the end

# The recorded markers' majors must be free here, so no real driver's device is aliased.
for major in $(cat "$HOST"/root/dev/alixpu* | sed -n 's/^c \([0-9]*\):.*/\1/p' | sort -u); do
  if awk -v m="$major" '/^Block devices:/ {exit} $1 == m {found=1} END {exit !found}' /proc/devices; then
    echo "rig-thead: major $major is a driver's on this machine (/proc/devices); not aliasing it"
    rm -rf "$WORK"; exit 2
  fi
done

mkdir -p "$HOST/root$LIBDIR"
printf '/usr/local/vppu/hgml_dlsym_hook.so\n/usr/local/vppu/hggc_quota.so\n' >"$HOST/root$LIBDIR/ld.so.preload"
for f in hggc_quota.so hgml_dlsym_hook.so ppu-monitor; do
  echo "stand-in $f (rig-thead.sh)" >"$HOST/root$LIBDIR/$f"
done
for f in ld.so.preload hggc_quota.so hgml_dlsym_hook.so ppu-monitor; do
  if [ ! -e "$LIBDIR/$f" ]; then
    mkdir -p "$LIBDIR"
    cp "$HOST/root$LIBDIR/$f" "$LIBDIR/$f"
    chmod 0644 "$LIBDIR/$f"
    made+=("$LIBDIR/$f")
  fi
done
for marker in "$HOST"/root/dev/alixpu*; do
  n=/dev/$(basename "$marker")
  number=$(sed -n 's/^c \([0-9]*\):\([0-9]*\)$/\1 \2/p' "$marker")
  [ -n "$number" ] || { echo "rig-thead: $marker carries no device number"; rm -rf "$WORK"; exit 2; }
  if [ ! -e "$n" ]; then
    # shellcheck disable=SC2086
    mknod -m 0666 "$n" c $number
    made+=("$n")
  else
    echo "rig-thead: $n exists on this machine already; the container sees that node"
  fi
done

rig_up "/tmp/rig-thead"
D=$WORK/data
MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --manufacturer thead --node-name rig-node \
  --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" >/tmp/rig-thead-serve.log 2>&1 &
SERVE=$!
stop() {
  kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null
  $KC delete pod --all --wait=false >/dev/null 2>&1
  rig_down
  for m in "${made[@]}"; do rm -f "$m"; done
  rmdir "$LIBDIR" 2>/dev/null
  rm -rf "$WORK"
}
trap stop EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
for _ in $(seq 1 90); do
  [ "$(allocatable alibabacloud.com/ppu)" = 16 ] && [ -n "$(allocatable alibabacloud.com/ppu.sliced)" ] && break
  sleep 1
done
echo "allocatable: alibabacloud.com/ppu $(allocatable alibabacloud.com/ppu), .shared $(allocatable alibabacloud.com/ppu.shared), .sliced $(allocatable alibabacloud.com/ppu.sliced)"
[ "$(allocatable alibabacloud.com/ppu)" = 16 ] || fail "alibabacloud.com/ppu is not 16"
[ "$(allocatable alibabacloud.com/ppu.sliced)" = 2048 ] || fail "alibabacloud.com/ppu.sliced is not 16 x 128"
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1

pod() { # name limits(yaml flow) -> runs it, prints what its container saw
  busybox_pod "$1" 'ls -l /dev/ | grep alixpu | awk "{print \$NF, \$5, \$6}"; env | grep -E "^(HGGC_|LIBHGGC_)" | sort; for f in /usr/local/vppu/*; do [ -e $f ] && echo mounted $f; done; [ -e /etc/ld.so.preload ] && sed "s/^/preload /" /etc/ld.so.preload; touch /var/run/vppu/probe 2>/dev/null && echo ledger-dir writable; sleep 3600' "$2"
  saw "$1"
}
EXPECT_BY=lines   # expect (rig-lib.sh) counts lines
# Each card node's minor is its ordinal + 1 (what the recorded host's markers carry).
minors_match() { # pod
  local bad
  bad=$($KC logs "$1" 2>/dev/null | awk '$1 ~ /^alixpu_ppu[0-9]+$/ { n = substr($1, 11) + 1; if ($3 != n) print }')
  if [ -z "$bad" ]; then echo "  ok: every card node carries minor ordinal+1"; else echo "  WRONG: minors $bad"; failed=1; fi
}

pod thead-exclusive '{alibabacloud.com/ppu: "2"}'
expect thead-exclusive "/dev/alixpu (minor 0)" '^alixpu 509, 0$'
expect thead-exclusive "/dev/alixpu_ctl" '^alixpu_ctl '
expect thead-exclusive "two card nodes" '^alixpu_ppu[0-9]+ ' 2
expect thead-exclusive "no HGGC variable" '^HGGC_' 0
minors_match thead-exclusive
pod thead-shared '{alibabacloud.com/ppu.shared: "1"}'
expect thead-shared "one card node" '^alixpu_ppu[0-9]+ ' 1
expect thead-shared "both control nodes" '^alixpu(_ctl)? ' 2
minors_match thead-shared
pod thead-sliced '{alibabacloud.com/ppu.sliced: "1", alibabacloud.com/ppu.sliced.memory-percentage: "25", alibabacloud.com/ppu.sliced.cores-percentage: "100", alibabacloud.com/ppu.sliced.units: "400000"}'
expect thead-sliced "one card node" '^alixpu_ppu[0-9]+ ' 1
expect thead-sliced "HGGC_DEVICE_SM_LIMIT=100 (emitted at 100)" '^HGGC_DEVICE_SM_LIMIT=100$'
expect thead-sliced "HGGC_DEVICE_MEMORY_LIMIT_0 in bare MiB" '^HGGC_DEVICE_MEMORY_LIMIT_0=24576$'
expect thead-sliced "HGGC_LEDGER_PATH" '^HGGC_LEDGER_PATH=/var/run/vppu/ledger$'
expect thead-sliced "LIBHGGC_LOG_LEVEL=1" '^LIBHGGC_LOG_LEVEL=1$'
expect thead-sliced "the shim pair and ppu-monitor mounted" '^mounted /usr/local/vppu/(hggc_quota\.so|hgml_dlsym_hook\.so|ppu-monitor)$' 3
expect thead-sliced "ld.so.preload names the pair" '^preload /usr/local/vppu/(hgml_dlsym_hook|hggc_quota)\.so$' 2
expect thead-sliced "its ledger directory is writable" '^ledger-dir writable$'
$KC delete pod thead-exclusive thead-shared thead-sliced --wait=true --timeout=60s >/dev/null 2>&1

echo "=== churn: $N Pods of 1 alibabacloud.com/ppu"
rejected=0
for i in $(seq 1 "$N"); do
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: thead-churn-$i, namespace: default}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: localhost/rig/busybox:1.0, imagePullPolicy: Never, command: ["sleep", "3600"], resources: {limits: {alibabacloud.com/ppu: "1"}}}
EOT
  if ! $KC wait --for=condition=Ready "pod/thead-churn-$i" --timeout=60s >/dev/null 2>&1; then
    echo "  thead-churn-$i rejected: $($KC get pod "thead-churn-$i" -o jsonpath='{.status.reason}: {.status.message}')"
    rejected=$((rejected + 1))
  fi
  $KC delete pod "thead-churn-$i" --wait=true --timeout=60s >/dev/null
done
echo "alibabacloud.com/ppu: $N Pods, $rejected rejected"
[ "$rejected" = 0 ] || failed=1

[ "$failed" = 0 ] || echo "serve's log: /tmp/rig-thead-serve.log"
verdict rig-thead
