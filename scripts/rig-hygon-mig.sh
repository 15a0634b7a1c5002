#!/usr/bin/env bash
# rig-hygon-mig.sh [HOST] — Hygon's node-wide MIG partitions (issues 26 item 4, 45 item 5) on the
# rig's real kubelet and containerd (../shared/rig), on a copy of the recorded host HOST:
#   hygon-8x-bw150-mig            (the default) 8× BW in MIG mode, no instance: the Pod's partition
#                                 is made with `hy-smi mig -cgi <id> -C -i <dev>`;
#   hygon-8x-bw150-mig-4-live     the same node holding four live instances no marker names (two
#                                 2g.15gb on DCU 0, a 4g.31gb on DCU 1, an 8g.63gb on DCU 2), their
#                                 registry files written in Hygon's grammar by
#                                 scripts/make-hygon-hosts.py: the Pod's partition is one of them,
#                                 claimed, none made.
#   1. serve --manufacturer hygon on the copy (its mig-state.json and the driver's registry under
#      root/etc/dmi_mig_config follow the hy-smi mig commands serve runs);
#   2. the device nodes the responder names (/dev/kfd, /dev/mkfd, /dev/dri/card1..8,
#      /dev/dri/renderD128..135) made on this machine as aliases of /dev/null (char 1:3) where
#      absent, /opt/hyhal and /opt/dtk as empty directories where absent, and /etc/dmi_mig_config
#      as a link to the copy's registry (the partition's file is bind-mounted at its own
#      host path, so the host must have it there) — all removed at the end;
#   3. the kubelet registers hygon.com/dcu.partitioned 32 (four 2g.15gb a card; 28 on the live
#      host, whose live instances take or hold slices) and no whole card;
#   4. a Pod of one mig-2g.15gb partition runs: its container sees /dev/kfd, /dev/mkfd, one card
#      and one render node, DMI_MIG_VISIBLE_DEVICE=MIG-<uuid>, and its registry file read-only at
#      /etc/dmi_mig_config/ci/dev<N>gi<G>ci<C>.conf (printed whole: the GI block's 13 lines, the CI
#      block's 14), whose mig_uuid is that UUID; the marker hygon-mig-<card>.json carries
#      pciBusID and confPath; on the live host the UUID is one the registry held before serve
#      started and no instance was made;
#   5. serve restarted with its ledger journal deleted: rebound from the marker, Pod Running;
#   6. the Pod deleted: its instance is destroyed (CI, then GI), its registry file and marker go
#      (on the live host the three others are still there: the orphan rule's 300 s debounce).
#
#   scripts/build-release.sh && scripts/rig-hygon-mig.sh
#   scripts/rig-hygon-mig.sh hygon-8x-bw150-mig-4-live
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"

RECORDING=${1:-hygon-8x-bw150-mig}
# The partitioned pool's tokens (accel_core::ledger::partitions::room): a card's grants, its
# claimable live instances and the most of one profile its free slices hold. Empty: 4 a card.
# Four live: DCU 0 2 claimable + 2 free 2g.15gb = 4; DCU 1 its 4g.31gb + 2 free 2g.15gb = 3;
# DCU 2 its 8g.63gb = 1; five empty cards 20.
case "$RECORDING" in
  hygon-8x-bw150-mig) TOKENS=32 ;;
  hygon-8x-bw150-mig-4-live) TOKENS=28 ;;
  *) echo "usage: $0 [hygon-8x-bw150-mig|hygon-8x-bw150-mig-4-live]"; exit 2 ;;
esac
WORK=$(mktemp -d /tmp/rig-hygon-mig.XXXXXX)
HOST=$WORK/$RECORDING
cp -a "$REPO/testdata/hosts/$RECORDING" "$HOST"
instances() { python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["instances"]))' "$HOST/mig-state.json"; }
serial() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["serial"])' "$HOST/mig-state.json"; }
LIVE_BEFORE=$(instances)
SERIAL_BEFORE=$(serial)
UUIDS_BEFORE=$(sed -n 's/^mig_uuid: *//p' "$HOST"/root/etc/dmi_mig_config/ci/*.conf 2>/dev/null | sort)
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
for _ in $(seq 1 90); do [ "$(allocatable $P)" = $TOKENS ] && break; sleep 1; done
echo "registered: allocatable $P $(allocatable $P) (want $TOKENS), hygon.com/dcu '$(allocatable hygon.com/dcu)' (want none or 0)"
[ "$(allocatable $P)" = $TOKENS ] || fail "$P is not $TOKENS"
case "$(allocatable hygon.com/dcu)" in ""|0) ;; *) fail "a MIG node advertises whole cards" ;; esac
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1
echo "host: $RECORDING, $LIVE_BEFORE live instance(s) before serve: $(echo $UUIDS_BEFORE)"

busybox_pod hygon-mig 'ls /dev/kfd /dev/mkfd /dev/dri/ | tr "\n" " "; echo; env | grep -E "^DMI_" ; for f in /etc/dmi_mig_config/ci/*.conf; do echo "conf $f"; sed "s/^/  /" "$f"; touch "$f" 2>/dev/null && echo conf-writable; done; for d in /opt/hyhal /opt/hygondriver; do [ -d $d ] && echo mounted $d; done; sleep 3600' \
  "{$P: \"1\", $P.mig-2g.15gb: \"1\"}"
saw hygon-mig
expect hygon-mig "/dev/kfd" '^/dev/kfd'
expect hygon-mig "/dev/mkfd" '/dev/mkfd'
expect hygon-mig "DMI_MIG_VISIBLE_DEVICE" '^DMI_MIG_VISIBLE_DEVICE=MIG-'
expect hygon-mig "its registry file" '^conf /etc/dmi_mig_config/ci/dev[0-9]+gi[0-9]+ci[0-9]+\.conf$'
expect hygon-mig "read-only" 'conf-writable' 0
expect hygon-mig "/opt/hyhal" '^mounted /opt/hyhal$'
expect hygon-mig "the file in Hygon's grammar: 27 key/value lines, the GI block (13) then the CI block (14)" '^  [a-zA-Z_]+: ' 27
expect hygon-mig "both blocks' placement and cu_mask lines, mig_uuid once" '^  (placement_start|placement_size|cu_mask|mig_uuid): ' 9
uuid=$($KC logs hygon-mig 2>/dev/null | sed -n 's/^DMI_MIG_VISIBLE_DEVICE=MIG-//p')
conf_uuid=$($KC logs hygon-mig 2>/dev/null | sed -n 's/^  mig_uuid: *//p')
echo "  the variable names $uuid; the mounted file's mig_uuid is $conf_uuid"
[ -n "$uuid" ] && [ "$uuid" = "$conf_uuid" ] || fail "the variable and the registry file disagree"
conf=$($KC logs hygon-mig 2>/dev/null | sed -n 's/^conf //p')
if [ "$LIVE_BEFORE" -gt 0 ]; then
  echo "$UUIDS_BEFORE" | grep -qxF "$uuid" && echo "  ok: the partition is one the registry held before serve started (claimed)" \
    || fail "the partition $uuid is not one of the live instances"
  echo "  instances in mig-state.json: $(instances) (want $LIVE_BEFORE), creates: $(( $(serial) - SERIAL_BEFORE )) (want 0)"
  [ "$(instances)" = "$LIVE_BEFORE" ] && [ "$(serial)" = "$SERIAL_BEFORE" ] || fail "an instance was made for a profile a live one had"
fi
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
for _ in $(seq 1 60); do [ "$(allocatable $P)" = $TOKENS ] && break; sleep 1; done
echo "  allocatable $P $(allocatable $P) (want $TOKENS)"
if grep -q "from its ownership record" /tmp/rig-hygon-mig-serve.log; then
  echo "  the partition was rebuilt from its ownership record"
else
  echo "  NOT rebuilt from its ownership record"; failed=1
fi
[ "$($KC get pod hygon-mig -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ] || {
  echo "  hygon-mig is not Running after the restart"; failed=1; }

$KC delete pod hygon-mig --wait=true --timeout=60s >/dev/null 2>&1
want=$(( LIVE_BEFORE > 0 ? LIVE_BEFORE - 1 : 0 ))
for _ in $(seq 1 30); do
  n=$(instances)
  [ "$n" = $want ] && break; sleep 1
done
echo "  instances left in mig-state.json: $n (want $want)"
[ "$n" = $want ] || failed=1
left=$(ls "$HOST"/root/etc/dmi_mig_config/ci/ 2>/dev/null | grep -c '\.conf$')
echo "  registry files left: $left (want $want)"
[ "$left" = $want ] || failed=1
if [ -n "$conf" ] && [ -e "$HOST/root$conf" ]; then fail "its registry file $conf is still there"; fi
[ -z "$(ls "$D"/pods/*/c-c/hygon-mig-*.json 2>/dev/null)" ] || fail "the marker is still there"
grep -E " (WARN|ERROR) " /tmp/rig-hygon-mig-serve.log | tail -8
[ "$failed" = 0 ] || echo "serve's log: /tmp/rig-hygon-mig-serve.log"
verdict rig-hygon-mig
