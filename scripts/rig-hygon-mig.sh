#!/usr/bin/env bash
# rig-hygon-mig.sh — Hygon's node-wide MIG partitions (issue 26 item 4) on the rig's real kubelet
# and containerd (../shared/rig):
#   1. serve --manufacturer hygon on a copy of testdata/hosts/hygon-8x-bw150-mig (8× BW in MIG
#      mode, no instance; its mig-state.json and the driver's registry under
#      root/etc/dmi_mig_config follow the hy-smi mig commands serve runs);
#   2. the device nodes the responder names (/dev/kfd, /dev/mkfd, /dev/dri/card1..8,
#      /dev/dri/renderD128..135) made on this machine as aliases of /dev/null (char 1:3) where
#      absent, /opt/hyhal and /opt/dtk as empty directories where absent, and /etc/dmi_mig_config
#      as a link to the recording's registry (the partition's file is bind-mounted at its own
#      host path, so the host must have it there) — all removed at the end;
#   3. the kubelet registers hygon.com/dcu.partitioned 32 (four 2g.15gb a card) and no whole card;
#   4. a Pod of one mig-2g.15gb partition runs: its container sees /dev/kfd, /dev/mkfd, one card
#      and one render node, DMI_MIG_VISIBLE_DEVICE=MIG-<uuid>, and its registry file read-only at
#      /etc/dmi_mig_config/ci/dev<N>gi<G>ci<C>.conf, whose mig_uuid is that UUID; the marker
#      hygon-mig-<card>.json carries pciBusID and confPath;
#   5. serve restarted with its ledger journal deleted: rebound from the marker, Pod Running;
#   6. the Pod deleted: the instance is destroyed (CI, then GI), its registry file and marker go.
#
#   scripts/build-release.sh && scripts/rig-hygon-mig.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"

WORK=$(mktemp -d /tmp/rig-hygon-mig.XXXXXX)
HOST=$WORK/hygon-8x-bw150-mig
cp -a "$REPO/testdata/hosts/hygon-8x-bw150-mig" "$HOST"
made=()      # device nodes and links this script created on the machine, removed at the end
made_dirs=() # directories it created, removed at the end
hygon_machine "$HOST"
if [ -e /etc/dmi_mig_config ]; then
  echo "rig-hygon-mig: /etc/dmi_mig_config exists on this machine; not replacing it"
  rm -rf "$WORK"; exit 2
fi
ln -s "$HOST/root/etc/dmi_mig_config" /etc/dmi_mig_config
made+=(/etc/dmi_mig_config)

rig_up "/tmp/rig-hygon-mig"
fresh_devices
D=$WORK/data
: >/tmp/rig-hygon-mig-serve.log
serve() {
  RUST_LOG=${RUST_LOG:-info} MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --manufacturer hygon \
    --node-name rig-node --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" \
    >>/tmp/rig-hygon-mig-serve.log 2>&1 &
  SERVE=$!
}
serve
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
P=hygon.com/dcu.partitioned
for _ in $(seq 1 90); do [ "$(allocatable $P)" = 32 ] && break; sleep 1; done
echo "registered: allocatable $P $(allocatable $P) (want 32), hygon.com/dcu '$(allocatable hygon.com/dcu)' (want none or 0)"
[ "$(allocatable $P)" = 32 ] || fail "$P is not 32"
case "$(allocatable hygon.com/dcu)" in ""|0) ;; *) fail "a MIG node advertises whole cards" ;; esac
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1

busybox_pod hygon-mig 'ls /dev/kfd /dev/mkfd /dev/dri/ | tr "\n" " "; echo; env | grep -E "^DMI_" ; for f in /etc/dmi_mig_config/ci/*.conf; do echo "conf $f"; grep mig_uuid "$f"; touch "$f" 2>/dev/null && echo conf-writable; done; for d in /opt/hyhal /opt/hygondriver; do [ -d $d ] && echo mounted $d; done; sleep 3600' \
  "{$P: \"1\", $P.mig-2g.15gb: \"1\"}"
saw hygon-mig
expect hygon-mig "/dev/kfd" '^/dev/kfd'
expect hygon-mig "/dev/mkfd" '/dev/mkfd'
expect hygon-mig "DMI_MIG_VISIBLE_DEVICE" '^DMI_MIG_VISIBLE_DEVICE=MIG-'
expect hygon-mig "its registry file" '^conf /etc/dmi_mig_config/ci/dev[0-9]+gi[0-9]+ci[0-9]+\.conf$'
expect hygon-mig "read-only" 'conf-writable' 0
expect hygon-mig "/opt/hyhal" '^mounted /opt/hyhal$'
uuid=$($KC logs hygon-mig 2>/dev/null | sed -n 's/^DMI_MIG_VISIBLE_DEVICE=MIG-//p')
conf_uuid=$($KC logs hygon-mig 2>/dev/null | sed -n 's/^mig_uuid: *//p')
echo "  the variable names $uuid; the mounted file's mig_uuid is $conf_uuid"
[ -n "$uuid" ] && [ "$uuid" = "$conf_uuid" ] || fail "the variable and the registry file disagree"
cards=$($KC logs hygon-mig 2>/dev/null | head -1 | grep -o 'card[0-9]*' | wc -l)
echo "  card nodes seen: $cards (want 1)"
[ "$cards" = 1 ] || failed=1
marker=$(ls "$D"/pods/*/c-c/hygon-mig-*.json 2>/dev/null | head -1)
[ -n "$marker" ] || fail "no hygon-mig marker under $D/pods"
python3 - "$marker" <<'PY' || failed=1
import json, sys
m = json.load(open(sys.argv[1]))
print("  marker:", {k: m.get(k) for k in ("card", "pciBusID", "profile", "profileID", "giID", "ciID", "migUUID", "confPath", "start", "length")})
sys.exit(not (m.get("pciBusID") and m.get("confPath") and m.get("profile") == "2g.15gb"))
PY

echo "serve restarted with its ledger journal deleted:"
kill $SERVE; wait $SERVE 2>/dev/null
rm -f "$D/ledger.journal"
serve
sleep 5
for _ in $(seq 1 60); do [ "$(allocatable $P)" = 32 ] && break; sleep 1; done
echo "  allocatable $P $(allocatable $P) (want 32)"
if grep -q "from its ownership record" /tmp/rig-hygon-mig-serve.log; then
  echo "  the partition was rebuilt from its ownership record"
else
  echo "  NOT rebuilt from its ownership record"; failed=1
fi
[ "$($KC get pod hygon-mig -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ] || {
  echo "  hygon-mig is not Running after the restart"; failed=1; }

$KC delete pod hygon-mig --wait=true --timeout=60s >/dev/null 2>&1
for _ in $(seq 1 30); do
  n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["instances"]))' "$HOST/mig-state.json")
  [ "$n" = 0 ] && break; sleep 1
done
echo "  instances left in mig-state.json: $n (want 0)"
[ "$n" = 0 ] || failed=1
left=$(ls "$HOST"/root/etc/dmi_mig_config/ci/ 2>/dev/null | grep -c '\.conf$')
echo "  registry files left: $left (want 0)"
[ "$left" = 0 ] || failed=1
[ -z "$(ls "$D"/pods/*/c-c/hygon-mig-*.json 2>/dev/null)" ] || fail "the marker is still there"
grep -E " (WARN|ERROR) " /tmp/rig-hygon-mig-serve.log | tail -8
[ "$failed" = 0 ] || echo "serve's log: /tmp/rig-hygon-mig-serve.log"
verdict rig-hygon-mig
