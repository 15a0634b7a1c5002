#!/usr/bin/env bash
# rig-bench.sh — device-manager and NVIDIA's device plugin side by side on the rig's real kubelet
# (../shared/rig), one after the other on the same node, for BENCHMARKS.md:
#   - RSS idle (registered, 10 s after the node advertises its GPUs) and after the churn;
#   - mean Allocate as the kubelet measures it (kubelet_device_plugin_alloc_duration_seconds)
#     over N Pods created one after another, for nvidia.com/gpu (both) and nvidia.com/gpu.shared
#     (ours; NVIDIA's plugin serves no shared resource);
#   - with METRICS=1, our own Allocate histogram beside the kubelet's (what the kubelet adds),
#     and what our own time is made of (device_manager_allocate_stage_duration_seconds:
#     identify, lock, ledger, respond, journal_write, durable; the journal's fdatasyncs);
#   - GetPreferredAllocation and Allocate through a plain v1beta1 client (dp-bench, n=1000),
#     with METRICS=1 our own histogram and stages over the same 1000 Allocates beside it, and
#     the Allocate p99 ratio to NVIDIA's (the tail target of issue 44 item 13).
#   - with SMAPS=1, the resident memory of each mapping after the churn (what RSS is made of).
#
#   scripts/build-release.sh
#   N=100 scripts/rig-bench.sh
#
# Needs root and the rig built (../shared/rig/build.sh). CI cannot run it: a person runs it and
# keeps what it printed. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
N=${N:-100}
HOST=$REPO/testdata/hosts/hgx-h100-8gpu
PLUGINS=$K/kubelet/device-plugins

rig_up "/tmp/rig-bench"
D=$(mktemp -d)
M=$(mktemp -d)
SERVE=
trap '[ -n "$SERVE" ] && kill $SERVE 2>/dev/null; rig_down; rm -rf "$D" "$M"' EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
$KC delete pod --all --wait=true --timeout=60s >/dev/null 2>&1

kubelet_metric() { # resource -> "sum count"
  curl -sk --cert $K/pki/admin.crt --key $K/pki/admin.key https://127.0.0.1:10250/metrics 2>/dev/null |
    awk -v r="$1" 'index($0, "kubelet_device_plugin_alloc_duration_seconds_sum{resource_name=\"" r "\"}")==1 {s=$2}
      index($0, "kubelet_device_plugin_alloc_duration_seconds_count{resource_name=\"" r "\"}")==1 {c=$2}
      END {print (s==""?0:s), (c==""?0:c)}'
}
own_metric() { # resource -> "sum count" of our own Allocate histogram (seconds)
  curl -s http://127.0.0.1:9402/metrics 2>/dev/null |
    awk -v r="$1" '/^device_manager_allocate_duration_seconds_(sum|count)\{/ && index($0, "resource=\"" r "\"") {
        if ($0 ~ /_sum\{/) s=$NF; else c=$NF }
      END {print (s==""?0:s), (c==""?0:c)}'
}
scrape() { [ "${METRICS:-0}" = 1 ] && curl -s http://127.0.0.1:9402/metrics >"$M/$1" 2>/dev/null; true; }
breakdown() { # resource before after: our own histograms between two scrapes (METRICS=1)
  [ "${METRICS:-0}" = 1 ] || return 0
  python3 - "$1" "$M/$2" "$M/$3" <<'PY'
import re, sys
res, before, after = sys.argv[1], sys.argv[2], sys.argv[3]
def read(path):
    out = {}
    for line in open(path):
        m = re.match(r'^(\w+)(?:\{(.*)\})? (\S+)$', line.strip())
        if m:
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))
            out[(m.group(1), labels)] = float(m.group(3))
    return out
b, a = read(before), read(after)
def hist(name, **want):
    buckets, total, count = [], 0.0, 0.0
    for (n, labels), v in a.items():
        d = dict(labels)
        if any(d.get(k) != w for k, w in want.items()):
            continue
        delta = v - b.get((n, labels), 0.0)
        if n == name + "_bucket":
            buckets.append((float(d["le"]), delta))
        elif n == name + "_sum":
            total = delta
        elif n == name + "_count":
            count = delta
    return sorted(buckets), total, count
def quantile(buckets, count, q):  # as PromQL's histogram_quantile: linear inside the bucket
    rank, lo, below = q * count, 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * ((rank - below) / (cum - below) if cum > below else 1)
        lo, below = le, cum
    return lo
def show(buckets, total, count):
    if not count:
        return "none"
    us = lambda s: "%.0f" % (s * 1e6)
    return "%d calls, mean %s, p50 ~%s, p99 ~%s us" % (
        count, us(total / count), us(quantile(buckets, count, .5)), us(quantile(buckets, count, .99)))
print("  ours inside the handler: " + show(*hist("device_manager_allocate_duration_seconds", resource=res)))
for stage in ["identify", "lock", "ledger", "respond", "journal_write", "durable"]:
    h = hist("device_manager_allocate_stage_duration_seconds", resource=res, stage=stage)
    if h[2]:
        print("    %-13s %s" % (stage, show(*h)))
print("    journal fdatasync (every sync, releases too): " + show(*hist("device_manager_journal_sync_duration_seconds")))
PY
}
mean_us() { python3 -c "b=[float(x) for x in '$1'.split()]; a=[float(x) for x in '$2'.split()]; n=a[1]-b[1]; print(('%.0f us over %d calls' % ((a[0]-b[0])/n*1e6, n)) if n else 'n/a')"; }
alloc() { $KC get node rig-node -o jsonpath="{.status.allocatable.${1//./\\.}}" 2>/dev/null; }
rss() { # VmRSS, and its anonymous and file-backed shares
  awk '/^VmRSS/{t=$2} /^RssAnon/{a=$2} /^RssFile/{f=$2}
    END {printf "%.1f MiB (anon %.1f, file %.1f)", t/1024, a/1024, f/1024}' "/proc/$1/status"
}
smaps() { # with SMAPS=1: the resident KiB of each mapped file and of the anonymous memory
  [ "${SMAPS:-0}" = 1 ] || return 0
  awk '/^[0-9a-f]+-[0-9a-f]+ /{name=($6==""?"[anon]":$6)} /^Rss:/{r[name]+=$2}
    END {for (n in r) if (r[n] >= 64) printf "  %6d KiB  %s\n", r[n], n}' "/proc/$1/smaps" | sort -rn
}
churn() { # who resource
  local res=$2 b a ob oa rejected=0
  b=$(kubelet_metric "$res"); ob=$(own_metric "$res"); scrape "churn-before"
  for i in $(seq 1 "$N"); do
    cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: bench-$i, namespace: default}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: localhost/rig/busybox:1.0, imagePullPolicy: Never, command: ["sleep", "3600"], resources: {limits: {$res: "1"}}}
EOT
    if ! $KC wait --for=condition=Ready pod/bench-$i --timeout=60s >/dev/null 2>&1; then
      echo "  $1: bench-$i rejected: $($KC get pod bench-$i -o jsonpath='{.status.reason}: {.status.message}')"
      rejected=$((rejected + 1))
    fi
    $KC delete pod bench-$i --wait=true --timeout=60s >/dev/null
  done
  a=$(kubelet_metric "$res"); oa=$(own_metric "$res")
  echo "$1 $res: $N Pods, $rejected rejected; mean Allocate (kubelet) $(mean_us "$b" "$a")"
  [ "${METRICS:-0}" = 1 ] && echo "  our own histogram: $(mean_us "$ob" "$oa")"
  scrape "churn-after"; breakdown "$res" churn-before churn-after
}
bench() { # who socket -> prints dp-bench's figures; BENCH_P99 is its Allocate p99
  echo "$1 dp-bench -n 1000 (µs: calls errors p50 p90 p99 max mean):"
  $K/bin/dp-bench -socket "$2" -n 1000 >"$M/dp-bench" 2>&1
  grep -E "GetPreferredAllocation|Allocate|devices" "$M/dp-bench" | sed 's/^/  /'
  BENCH_P99=$(awk '$1 == "Allocate" {print $6}' "$M/dp-bench")
}

echo "=== device-manager ($BIN, host $HOST)"
extra=()
[ "${METRICS:-0}" = 1 ] && extra=(--metrics-listen 127.0.0.1:9402)
# As the chart runs it (deviceManager.mallocArenaMax); MALLOC_ARENA_MAX= (empty) for glibc's default.
MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX-1} "$BIN" serve --node-name rig-node --host-root "$HOST" --kubelet-dir $K/kubelet --data-dir "$D" "${extra[@]}" \
  >/tmp/rig-bench-serve.log 2>&1 &
SERVE=$!
for _ in $(seq 1 60); do [ "$(alloc nvidia.com/gpu)" = 8 ] && break; sleep 1; done
sleep 10
echo "device-manager: RSS idle $(rss $SERVE)"
churn device-manager nvidia.com/gpu
churn device-manager nvidia.com/gpu.shared
echo "device-manager: RSS after the churn $(rss $SERVE)"
smaps $SERVE
scrape bench-before
bench device-manager "$PLUGINS/gpustack-nvidia.com_gpu.sock"
OURS_P99=$BENCH_P99
scrape bench-after; breakdown nvidia.com/gpu bench-before bench-after
kill $SERVE; wait $SERVE 2>/dev/null; SERVE=

echo "=== NVIDIA's device plugin v0.20.0 (go-nvml dgxa100 mock)"
for _ in $(seq 1 30); do [ "$(alloc nvidia.com/gpu)" = 0 ] && break; sleep 1; done
P=$($K/peers/nvidia-dp.sh 2>/dev/null | tail -1)
for _ in $(seq 1 60); do [ "$(alloc nvidia.com/gpu)" = 8 ] && break; sleep 1; done
sleep 10
echo "nvidia-device-plugin: RSS idle $(rss "$P")"
churn nvidia-device-plugin nvidia.com/gpu
echo "nvidia-device-plugin: RSS after the churn $(rss "$P")"
smaps "$P"
bench nvidia-device-plugin "$PLUGINS/nvidia-gpu.sock"
kill "$P"
python3 -c "import sys; o, n = float(sys.argv[1]), float(sys.argv[2]); print('Allocate p99 via dp-bench: ours %.1f us, NVIDIA %.1f us: %.2fx (target <= 0.5x: %s)' % (o, n, o / n, 'met' if o <= 0.5 * n else 'NOT met'))" "$OURS_P99" "$BENCH_P99" 2>/dev/null ||
  echo "Allocate p99 via dp-bench: ours $OURS_P99 us, NVIDIA $BENCH_P99 us"
