#!/usr/bin/env bash
# rig-thead-mig.sh — T-Head's per-card MIG partitions (issue 28 item 5) on the rig's real kubelet
# and containerd (../shared/rig):
#   1. serve --manufacturer thead on a copy of testdata/hosts/thead-16x-zw810e-mig2 (PPUs 14 and
#      15 in MIG mode, no instances; its mig-state.json and the driver's capability tree under
#      root/ follow the ppu-smi mig commands serve runs);
#   2. the device nodes the responder names created on this machine where absent, each with the
#      number its marker in the recorded host carries, and the capability nodes a partition on
#      PPU 14 or 15 can be given (/dev/alixpu-caps/alixpu-cap<minor>, major 505, the minors the
#      replay's driver gives GPU instances 0-7 and their compute instance 0). No driver owns
#      those majors here (checked in /proc/devices); nothing opens them. Removed at the end;
#   3. the kubelet registers alibabacloud.com/ppu 14 (the whole cards) and .partitioned 4 (two
#      4g.48gb a MIG card);
#   4. a Pod of one 4g.48gb partition runs: its container sees the two control nodes, exactly
#      one card node (14 or 15), and the two capability nodes whose minors the driver's tree
#      names for the instance serve made. The tokens stay 4 (a card's healthy tokens are its
#      instances plus its largest placeable count: 1 + 1 on the card, 2 on the other), and the
#      Node's capacity keys follow the room (a key counts the Pods' own instances of its profile,
#      which the scheduler subtracts, plus what still fits): mig-4g.48gb stays 4 (1 + 1 + 2),
#      mig-8g.96gb 2 -> 1 (its card has no room for one now);
#   5. serve restarted with its ledger journal deleted: the partition is rebound from its
#      ownership record (thead-mig-<card UUID>.json), the keys stay, the Pod keeps running;
#   6. the Pod deleted: the instance is destroyed (CI, then GI), its marker is gone, and the
#      keys are back at 4 and 2.
#
#   scripts/build-release.sh && scripts/rig-thead-mig.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"

WORK=$(mktemp -d /tmp/rig-thead-mig.XXXXXX)
HOST=$WORK/thead-16x-zw810e-mig2
cp -a "$REPO/testdata/hosts/thead-16x-zw810e-mig2" "$HOST"
CAPS_MAJOR=505
made=()   # what this script created on the machine, removed at the end

majors=$( (cat "$HOST"/root/dev/alixpu* | sed -n 's/^c \([0-9]*\):.*/\1/p'; echo $CAPS_MAJOR) | sort -u)
for major in $majors; do
  if awk -v m="$major" '/^Block devices:/ {exit} $1 == m {found=1} END {exit !found}' /proc/devices; then
    echo "rig-thead-mig: major $major is a driver's on this machine (/proc/devices); not aliasing it"
    rm -rf "$WORK"; exit 2
  fi
done
node() { # path major minor
  if [ ! -e "$1" ]; then
    mkdir -p "$(dirname "$1")"
    mknod -m 0666 "$1" c "$2" "$3"
    made+=("$1")
  fi
}
for marker in "$HOST"/root/dev/alixpu*; do
  number=$(sed -n 's/^c \([0-9]*\):\([0-9]*\)$/\1 \2/p' "$marker")
  [ -n "$number" ] || { echo "rig-thead-mig: $marker carries no device number"; rm -rf "$WORK"; exit 2; }
  # shellcheck disable=SC2086
  node "/dev/$(basename "$marker")" $number
done
# The replay's driver: GI minor 229376 + 256*ppu + 16*gi, its CI 0 one more than that plus 1.
for ppu in 14 15; do
  for gi in 0 1 2 3 4 5 6 7; do
    m=$((229376 + 256 * ppu + 16 * gi))
    node "/dev/alixpu-caps/alixpu-cap$m" $CAPS_MAJOR $m
    node "/dev/alixpu-caps/alixpu-cap$((m + 1))" $CAPS_MAJOR $((m + 1))
  done
done

rig_up "/tmp/rig-thead-mig"
fresh_devices
D=$WORK/data
: >/tmp/rig-thead-mig-serve.log
serve() {
  RUST_LOG=${RUST_LOG:-info} MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --manufacturer thead \
    --node-name rig-node --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" \
    >>/tmp/rig-thead-mig-serve.log 2>&1 &
  SERVE=$!
}
serve
stop() {
  kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null
  $KC delete pod --all --wait=false >/dev/null 2>&1
  rig_down
  for m in "${made[@]}"; do rm -f "$m"; done
  rmdir /dev/alixpu-caps 2>/dev/null
  rm -rf "$WORK"
}
trap stop EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
P=alibabacloud.com/ppu.partitioned
want() { # value label
  for _ in $(seq 1 60); do [ "$(allocatable $P)" = "$1" ] && break; sleep 1; done
  echo "$2: allocatable $P: $(allocatable $P) (want $1)"
  [ "$(allocatable $P)" = "$1" ] || failed=1
}
capacity() { $KC get node rig-node -o jsonpath="{.status.capacity.${1//./\\.}}" 2>/dev/null; }
keys() { # 4g 8g label: the Node's per-profile capacity keys, waited for (30 s)
  for _ in $(seq 1 30); do
    [ "$(capacity $P.mig-4g.48gb)" = "$1" ] && [ "$(capacity $P.mig-8g.96gb)" = "$2" ] && break
    sleep 1
  done
  echo "$3: capacity $P.mig-4g.48gb $(capacity $P.mig-4g.48gb) (want $1), .mig-8g.96gb $(capacity $P.mig-8g.96gb) (want $2)"
  [ "$(capacity $P.mig-4g.48gb)" = "$1" ] && [ "$(capacity $P.mig-8g.96gb)" = "$2" ] || failed=1
}
want 4 "registered"
echo "allocatable alibabacloud.com/ppu: $(allocatable alibabacloud.com/ppu) (want 14)"
[ "$(allocatable alibabacloud.com/ppu)" = 14 ] || fail "alibabacloud.com/ppu is not 14"
echo "node capacity keys:"
$KC get node rig-node -o json | python3 -c '
import json,sys
c=json.load(sys.stdin)["status"]["capacity"]
for k in sorted(c):
    if k.startswith("alibabacloud.com/ppu.partitioned"): print("  %s: %s" % (k, c[k]))'
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1

busybox_pod thead-mig 'ls -l /dev/ | grep alixpu | awk "{print \$NF, \$5, \$6}"; ls -l /dev/alixpu-caps/ 2>/dev/null | awk "NF > 5 {print \$NF, \$5, \$6}"; env | grep -E "^(HGGC_|LIBHGGC_)"; sleep 3600' \
  "{$P: \"1\", $P.mig-4g.48gb: \"1\"}"
saw thead-mig
EXPECT_BY=lines
expect thead-mig "both control nodes" '^alixpu(_ctl)? ' 2
expect thead-mig "one card node, a MIG card's" '^alixpu_ppu1[45] ' 1
expect thead-mig "two capability nodes" '^alixpu-cap[0-9]+ 505, ' 2
expect thead-mig "no HGGC variable" '^(HGGC_|LIBHGGC_)' 0
# The minors are the ones the driver's tree names for the instance serve made.
python3 - "$HOST/mig-state.json" "$HOST/root" >"$WORK/want" <<'PY'
import json, sys, os
state = json.load(open(sys.argv[1]))
for i in state["instances"]:
    base = os.path.join(sys.argv[2], "proc/driver/alixpu/capabilities/ppu%d/mig/gi%d" % (i["gpu"], i["gpuInstance"]))
    for access in (os.path.join(base, "access"), os.path.join(base, "ci0", "access")):
        for line in open(access):
            if line.startswith("DeviceFileMinor:"):
                print("alixpu-cap%s" % line.split(":")[1].strip())
PY
echo "  the driver's tree names: $(tr '\n' ' ' <"$WORK/want")"
for cap in $(cat "$WORK/want"); do
  if $KC logs thead-mig 2>/dev/null | grep -q "^$cap 505, "; then echo "  ok: $cap injected"; else echo "  WRONG: $cap not injected"; failed=1; fi
done
[ "$(wc -l <"$WORK/want")" = 2 ] || fail "mig-state.json does not hold exactly one instance"
want 4 "after one 4g.48gb (1 allocated + 1 placeable on its card, 2 on the other)"
keys 4 1 "after one 4g.48gb"
ls "$D"/pods/*/c-c/thead-mig-*.json 2>/dev/null | sed 's/^/  marker: /' || true
[ -n "$(ls "$D"/pods/*/c-c/thead-mig-*.json 2>/dev/null)" ] || fail "no thead-mig marker under $D/pods"

echo "serve restarted with its ledger journal deleted:"
kill $SERVE; wait $SERVE 2>/dev/null
rm -f "$D/ledger.journal"
serve
sleep 5
want 4 "after the restart without a journal"
keys 4 1 "after the restart without a journal"
if grep -q "from its ownership record" /tmp/rig-thead-mig-serve.log; then
  echo "  the partition was rebuilt from its ownership record"
else
  echo "  NOT rebuilt from its ownership record"; failed=1
fi
[ "$($KC get pod thead-mig -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ] || {
  echo "  thead-mig is not Running after the restart"; failed=1; }

$KC delete pod thead-mig --wait=true --timeout=60s >/dev/null 2>&1
keys 4 2 "after the Pod is gone (reclaimed)"
want 4 "after the Pod is gone"
python3 -c 'import json,sys; n=len(json.load(open(sys.argv[1]))["instances"]); print("  instances left in mig-state.json:", n); sys.exit(n != 0)' "$HOST/mig-state.json" || failed=1
[ -z "$(ls "$D"/pods/*/c-c/thead-mig-*.json 2>/dev/null)" ] || fail "the marker is still there"
grep -E " (WARN|ERROR) " /tmp/rig-thead-mig-serve.log | tail -8
[ "$failed" = 0 ] || echo "serve's log: /tmp/rig-thead-mig-serve.log"
verdict rig-thead-mig
