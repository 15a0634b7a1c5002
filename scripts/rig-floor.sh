#!/usr/bin/env bash
# rig-floor.sh — the floor under Allocate's tail (issue 44 item 13): the rig's dp-bench against
# NVIDIA's device plugin, then against a device plugin that does nothing but answer
# (crates/accel-plugin/examples/null_plugin.rs: tonic on a unix socket, the daemon's runtime, no
# ledger, journal, identification or notification), ROUNDS times alternately, on the same rig,
# and the ratio of each round's Allocate p99 to NVIDIA's. What the null plugin cannot go under,
# the daemon cannot either: its Allocate is that transport plus its own work.
#
#   ROUNDS=5 scripts/rig-floor.sh
#
# Needs root and the rig built (../shared/rig/build.sh); builds the example (release, as
# scripts/build-release.sh builds the daemon). CI cannot run it: a person runs it and keeps what
# it printed. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
ROUNDS=${ROUNDS:-5}
PLUGINS=$K/kubelet/device-plugins
host=$(rustc -vV | sed -n 's/^host: //p')
(cd "$REPO" && RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked -q -p accel-plugin --example null_plugin --target "$host") ||
  { echo "could not build the null plugin"; exit 2; }
NULL_BIN=$REPO/target/$host/release/examples/null_plugin
NULL_SOCK=$(mktemp -u /tmp/null-plugin.XXXXXX.sock)

rig_up "/tmp/rig-floor"
P=
NULL=
trap '[ -n "$P" ] && kill "$P" 2>/dev/null; [ -n "$NULL" ] && kill "$NULL" 2>/dev/null; rm -f "$NULL_SOCK"; rig_down' EXIT
trap 'exit 143' INT TERM HUP

p99() { # socket -> Allocate's p99 (µs) over dp-bench -n 1000; its Allocate line on stdout
  local out
  out=$($K/bin/dp-bench -socket "$1" -n 1000 2>&1) || { echo "dp-bench failed on $1: $out" >&2; return 1; }
  echo "$out" | awk '$1 == "Allocate" {print "  " $0 > "/dev/stderr"; print $6}'
}

P=$($K/peers/nvidia-dp.sh 2>/dev/null | tail -1)
for _ in $(seq 1 60); do [ "$(allocatable nvidia.com/gpu)" = 8 ] && break; sleep 1; done
[ "$(allocatable nvidia.com/gpu)" = 8 ] || { echo "NVIDIA's plugin did not register"; exit 2; }
"$NULL_BIN" "$NULL_SOCK" 8 >/tmp/rig-floor-null.log 2>&1 &
NULL=$!
for _ in $(seq 1 50); do [ -S "$NULL_SOCK" ] && break; sleep 0.1; done
sleep 10
echo "dp-bench -n 1000, Allocate (µs: calls errors p50 p90 p99 max mean), $ROUNDS rounds"
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r: NVIDIA's plugin"
  nv=$(p99 "$PLUGINS/nvidia-gpu.sock") || { failed=1; break; }
  echo "round $r: the null plugin"
  null=$(p99 "$NULL_SOCK") || { failed=1; break; }
  python3 -c "import sys; n, v = float(sys.argv[1]), float(sys.argv[2]); print('round %s: p99 null %.0f us, NVIDIA %.0f us: %.2fx' % (sys.argv[3], n, v, n / v))" "$null" "$nv" "$r"
done
[ "$failed" = 0 ] && echo "scripts/rig-floor.sh: OK" || echo "scripts/rig-floor.sh: FAILED"
