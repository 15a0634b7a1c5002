#!/usr/bin/env bash
# rig-cambricon-smlu.sh — Cambricon sMLU slices (issue 45 item 1) on the rig's real kubelet and
# containerd (../shared/rig):
#   1. serve --manufacturer cambricon on a copy of testdata/hosts/cambricon-8x-mlu370-smlu (cnmon
#      and the driver's sMLU listing replayed from the recording's smlu-state.json), with card 0's
#      sMLU mode turned off first; the node advertises 128 cambricon.com/mlu.sliced (16 a card);
#   2. a Pod of one cambricon.com/mlu.sliced (10 % memory, 30 % cores): the allocator turns card
#      0's mode on (`cnmon set -c 0 -S 1`), makes a profile (`cnmon smlu -c 0 -CP`, its answers on
#      stdin) and an instance (`-C`); the container sees /dev/cambricon_dev0, /dev/cambricon_ipcm0,
#      /dev/cambricon_ctl and its instance node /dev/cambricon-caps/cap_dev0_mi1, with
#      VIRTUAL_DEVICES naming it and no CAMBRICON_VISIBLE_DEVICES;
#   3. serve is restarted while the Pod runs: its log names the live instance and its Pod, and
#      the hand-made instance on card 7 as one no marker records, with the command that destroys
#      it (`cnmon smlu -c 7 -D 1`);
#   4. the Pod deleted, the instance and then the profile made for it are destroyed within the
#      reclaim passes (3 passes: the deletion's reconcile and the 60 s ticker); the hand-made
#      instance and the driver's profiles stay; card 0's mode stays on.
#   The device nodes the responder names are created on this machine as aliases of /dev/null
#   (char 1:3) where absent — this machine has no MLU — the instance nodes
#   /dev/cambricon-caps/cap_dev<card>_mi<1..2> included (the replay names them as the driver
#   would: lowest free instance id from 1). Each is listed in $MADE before it is made, and
#   removed first thing on exit (before the rig is taken down, so a run cut short in its
#   clean-up leaves none); a run killed outright (SIGKILL: no trap runs) leaves the list, and the
#   next run removes what it names once it holds the rig. Only aliases (char 1:3) are removed.
#   The script ends FAILED if /dev holds an entry named as Cambricon's nodes after that which
#   it did not hold before.
#
#   scripts/build-release.sh && scripts/rig-cambricon-smlu.sh     (or BIN=<a device-manager>)
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"

WORK=$(mktemp -d /tmp/rig-smlu.XXXXXX)
HOST=$WORK/cambricon-8x-mlu370-smlu
LOG=/tmp/rig-smlu-serve.log
# What this script makes under /dev, one path a line (a directory before what it holds); kept
# outside $WORK so that a killed run's list outlives it.
MADE=/tmp/rig-cambricon-smlu.made
SERVE=
stop_serve() {
  [ -n "$SERVE" ] && { kill "$SERVE" 2>/dev/null; wait "$SERVE" 2>/dev/null; }
  SERVE=
}

# remove_made: what $MADE lists, last made first; a node only while it is still an alias of
# /dev/null (char 1:3), a directory only when empty.
remove_made() {
  local p
  [ -f "$MADE" ] || return 0
  tac "$MADE" | while IFS= read -r p; do
    case "$p" in /dev/cambricon*|/dev/cmsg_ctrl*|/dev/commu*|/dev/cambr-*) ;; *) continue ;; esac
    if [ -d "$p" ] && [ ! -L "$p" ]; then
      rmdir "$p" 2>/dev/null
    elif [ -c "$p" ] && [ "$(stat -c %t:%T "$p")" = 1:3 ]; then
      rm -f "$p"
    fi
  done
  rm -f "$MADE"
}

# holds_rig: this shell holds the rig's lock (descriptor 9, taken by rig_up); not while it was
# still waiting for it, when the rig is another script's.
holds_rig() { { true >&9; } 2>/dev/null && flock -n 9; }

# Everything under /dev and on the rig is made after rig_up: a run stopped while it waited for
# the rig touches neither (they are another run's).
cleanup() {
  if holds_rig; then
    remove_made
    stop_serve
    # Bounded: after a signal to the whole process group the API server may be on its way out.
    $KC delete pod --all --wait=false --request-timeout=10s >/dev/null 2>&1
    rig_down
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up

# cambricon_in_dev: the entries of /dev named as Cambricon's driver names them, on one line.
cambricon_in_dev() { ls /dev | grep -iE '^(cambricon|cambr-|cmsg_ctrl|commu)' | tr '\n' ' '; }

alias_node() {
  if [ ! -e "$1" ]; then
    echo "$1" >>"$MADE"
    mknod -m 0666 "$1" c 1 3
  fi
}

# The recording's nodes (its root's dev/ marker files), and the instance nodes the replay may make.
alias_nodes() {
  local n c i
  if [ ! -d /dev/cambricon-caps ]; then echo /dev/cambricon-caps >>"$MADE"; mkdir /dev/cambricon-caps; fi
  for n in $(cd "$HOST/root" && find dev -type f | sed 's#^#/#'); do alias_node "$n"; done
  for c in 0 1 2 3 4 5 6 7; do for i in 1 2; do alias_node "/dev/cambricon-caps/cap_dev${c}_mi$i"; done; done
}

# state PYTHON-EXPRESSION: a fact of the replay's smlu-state.json (`s` is the state).
state() { python3 -c "import json,sys; s=json.load(open('$HOST/smlu-state.json')); print($1)"; }

# The allocator's and reclaimer's own lines (turned on, destroyed, found) are info.
export RUST_LOG=warn,accel_cambricon=info

serve() {
  MALLOC_ARENA_MAX=1 "$BIN" serve --manufacturer cambricon --node-name rig-node \
    --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$WORK/data" >>"$LOG" 2>&1 &
  SERVE=$!
}

cp -a "$REPO/testdata/hosts/cambricon-8x-mlu370-smlu" "$HOST"
# Card 0's sMLU mode off, in the replay's state and in the driver's listing it renders.
python3 - "$HOST" <<'EOF'
import json, sys
host = sys.argv[1]
path = f"{host}/smlu-state.json"
s = json.load(open(path)); s["cards"][0]["enabled"] = False
json.dump(s, open(path, "w"), indent=2)
listing = f"{host}/root/proc/driver/cambricon/mlus/0000:4f:00.0/smlu"
text = open(listing).read().replace("smlu_enable:1", "smlu_enable:0", 1)
open(listing, "w").write(text)
EOF
: >"$LOG"
rig_up /tmp/rig-smlu
# The rig is this script's now: what a killed run left goes, then this run's nodes are made.
if [ -f "$MADE" ]; then
  echo "removing what a killed run left: $(tr '\n' ' ' <"$MADE")"
  remove_made
fi
BEFORE=$(cambricon_in_dev)
[ -n "$BEFORE" ] && echo "note: /dev held cambricon entries before this run: $BEFORE"
alias_nodes
serve
for _ in $(seq 1 90); do [ "$(allocatable cambricon.com/mlu.sliced)" = 128 ] && break; sleep 1; done
echo "allocatable: cambricon.com/mlu $(allocatable cambricon.com/mlu), cambricon.com/mlu.sliced $(allocatable cambricon.com/mlu.sliced)"
[ "$(allocatable cambricon.com/mlu.sliced)" = 128 ] || fail "cambricon.com/mlu.sliced is not 16 a card"
echo "card 0 sMLU mode before: $(state "s['cards'][0]['enabled']")"

# No webhook runs here: the units it would write (10 % of a card) are given.
busybox_pod mlu-sliced 'ls /dev | tr "\n" " "; echo; ls /dev/cambricon-caps | tr "\n" " "; echo; env | grep -E "^(CAMBRICON_|VIRTUAL_|MLU_)" | sort; sleep 3600' \
  '{cambricon.com/mlu.sliced: "1", cambricon.com/mlu.sliced.memory-percentage: "10", cambricon.com/mlu.sliced.cores-percentage: "30", cambricon.com/mlu.sliced.units: "160000"}'
saw mlu-sliced
EXPECT_BY=words
expect mlu-sliced "one card node" '^cambricon_dev[0-9]+$' 1
expect mlu-sliced "its IPC node" '^cambricon_ipcm[0-9]+$' 1
expect mlu-sliced "no message control node (the sliced answer names none)" '^cmsg_ctrl[0-9]+$' 0
expect mlu-sliced "the control node" '^cambricon_ctl$' 1
expect mlu-sliced "its instance node, and only it" '^cap_dev[0-9]+_mi[0-9]+$' 1
expect mlu-sliced "VIRTUAL_DEVICES naming the instance node" '^VIRTUAL_DEVICES=/dev/cambricon-caps/cap_dev0_mi1$' 1
expect mlu-sliced "no CAMBRICON_VISIBLE_DEVICES" '^CAMBRICON_VISIBLE_DEVICES=' 0
echo "card 0 sMLU mode after: $(state "s['cards'][0]['enabled']")"
[ "$(state "s['cards'][0]['enabled']")" = True ] || fail "card 0's mode was not turned on"
echo "replay: instances (card, id, profile) $(state "[(i['card'], i['id'], i['profile']) for i in s['instances']]")"
echo "replay: card 0 profiles (id, quota, MiB) $(state "[(p['id'], p['quota'], p['memoryMiB']) for p in s['profiles'] if p['card'] == 0]")"
echo "driver listing of card 0:"
sed 's/^/    /' "$HOST/root/proc/driver/cambricon/mlus/0000:4f:00.0/smlu"
echo "marker: $(cat "$WORK"/data/cambricon/pods/*/c-c/cambricon-smlu.json 2>/dev/null || cat "$WORK"/data/pods/*/c-c/cambricon-smlu.json 2>/dev/null)"

echo "--- restart of serve while the Pod runs"
stop_serve
: >"$LOG.restart"
MALLOC_ARENA_MAX=1 "$BIN" serve --manufacturer cambricon --node-name rig-node \
  --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$WORK/data" >"$LOG.restart" 2>&1 &
SERVE=$!
for _ in $(seq 1 60); do grep -q "sMLU instance" "$LOG.restart" && break; sleep 1; done
sleep 2
grep -E "found a live sMLU instance|no marker records" "$LOG.restart" | sed 's/^/    /'
grep -q "found a live sMLU instance.*cap_dev0_mi1" "$LOG.restart" || fail "the restart did not find the live instance and its Pod"
grep -q "no marker records.*cnmon smlu -c 7 -D 1.*cap_dev7_mi1" "$LOG.restart" || fail "the restart did not report the hand-made instance with the command that destroys it"

echo "--- the Pod deleted"
$KC delete pod mlu-sliced --wait=true --timeout=60s >/dev/null 2>&1
gone() { [ "$(state "len([i for i in s['instances'] if i['card'] == 0])")" = 0 ]; }
started=$(date +%s)
for _ in $(seq 1 200); do gone && break; sleep 1; done
echo "after $(( $(date +%s) - started )) s: instances (card, id, profile) $(state "[(i['card'], i['id'], i['profile']) for i in s['instances']]")"
echo "card 0 profiles (id, quota, MiB) $(state "[(p['id'], p['quota'], p['memoryMiB']) for p in s['profiles'] if p['card'] == 0]")"
echo "card 0 sMLU mode: $(state "s['cards'][0]['enabled']")"
gone || fail "the instance was not reclaimed"
[ "$(state "[(i['card'], i['id']) for i in s['instances']]")" = "[(7, 1)]" ] || fail "the hand-made instance did not stay"
[ "$(state "sorted(p['id'] for p in s['profiles'] if p['card'] == 0)")" = "[0, 1, 2]" ] || fail "the profile made for the slice was not destroyed (or a driver's profile was)"
[ -e "$HOST/root/dev/cambricon-caps/cap_dev0_mi1" ] && fail "the instance node is still listed"
[ "$(state "s['cards'][0]['enabled']")" = True ] || fail "card 0's mode was turned back off"
ls "$WORK"/data/cambricon/pods/*/c-c/cambricon-smlu.json >/dev/null 2>&1 && fail "the marker is still there"
grep -hE "destroyed the sMLU instance|destroyed an sMLU profile|turned sMLU mode on" "$LOG" "$LOG.restart" | sed 's/^/    /'

echo "--- what this run made under /dev, removed"
stop_serve
remove_made
AFTER=$(cambricon_in_dev)
echo "Cambricon-named entries in /dev: ${AFTER:-none}"
[ "$AFTER" = "$BEFORE" ] || fail "/dev holds cambricon entries it did not hold before: $AFTER"

verdict rig-cambricon-smlu
