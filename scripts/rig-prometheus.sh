#!/usr/bin/env bash
# rig-prometheus.sh — the metrics, the chart's alerts and its dashboard against a real Prometheus
# (issue 47 item 4), on the rig's real kubelet (../shared/rig):
#   1. Prometheus and promtool from Debian (`apt-get install prometheus`; any service the package
#      starts is stopped and disabled: this script runs its own, on a free port, with a
#      configuration and a database under its temp directory);
#   2. the chart rendered with the PodMonitors, the PrometheusRule and the dashboard
#      (`helm template --api-versions monitoring.coreos.com/v1`); the rules extracted and checked
#      with `promtool check rules`, and every dashboard query checked the same way (as recording
#      rules, the Grafana variables replaced: $node and $manufacturer by `.*`, $__rate_interval by
#      1m);
#   3. two daemons on the rig's kubelet, each with --metrics-listen: NVIDIA on a live-looking host
#      (scripts/make-live-host.py) made from hgx-h100-8gpu-gpu3-remap-pending (GPU 3 has a
#      pending row remap: unhealthy), its kernel log a file this script writes; Hygon on a copy of
#      hygon-8x-bw150-mig (MIG partitions), run with a ServiceAccount that may not write `Devices`
#      (so its publish backlog stays retrying, as after an upgrade that lost the daemon's RBAC);
#   4. Prometheus scraping both daemons (honor_labels, as the chart's PodMonitor) and the kubelet's
#      /metrics (for kubelet_device_plugin_alloc_duration_seconds), the chart's rules loaded;
#   5. Pods of each family: exclusive, shared and a 25 % slice on NVIDIA, a 2g.15gb partition on
#      Hygon; then 60 % slices until the kubelet admits one that no single GPU has room for (the
#      plugin refuses it: no_room); a hardware XID 79 on GPU 7's bus in the kernel log;
#   6. AcceleratorUnhealthy must fire (GPU 3); then every dashboard query and every alert
#      expression is asked of Prometheus's HTTP API and must return series, one line each; the
#      holdings Prometheus holds are printed; `device-manager monitor` reads the NVIDIA daemon's
#      ledger and names the holders through the real kubelet's pod-resources;
#   7. the NVIDIA driver wedged (its GPU listing unreadable, nvidia-smi gone) and a `refresh`:
#      AcceleratorDetectionFailing's expression returns the failing daemon.
#   Everything made (Pods, the ServiceAccount and its role, device-node aliases, the
#   /etc/dmi_mig_config link, the staged library, the daemons, Prometheus) is removed at the end;
#   the rig is left stopped.
#
#   scripts/build-release.sh && scripts/rig-prometheus.sh      # or BIN=target/debug/device-manager
#
# Needs root, network for apt, the rig built (../shared/rig/build.sh) and helm (HELM, PATH, or
# the venv .ci/run makes in target/ci-helm-3.17.3.post1). CI cannot run it. The daemons' logs
# stay in /tmp/rig-prometheus-{nvidia,hygon}.log, Prometheus's in /tmp/rig-prometheus-prom.log.
set -u
. "$(dirname "$0")/rig-lib.sh"
HELM=${HELM:-$(command -v helm || true)}
[ -n "$HELM" ] || HELM=$REPO/target/ci-helm-3.17.3.post1/bin/helm
[ -x "$HELM" ] || { echo "no helm (set HELM)"; exit 2; }

WORK=$(mktemp -d /tmp/rig-prometheus.XXXXXX)
chmod 755 "$WORK"
NV_LOG=/tmp/rig-prometheus-nvidia.log
HY_LOG=/tmp/rig-prometheus-hygon.log
PROM_LOG=/tmp/rig-prometheus-prom.log
LIB=/var/lib/gpustack/operator/lib/cuda-13/libvgpu.so
SA=rig-prometheus-dm
NV_SERVE= HY_SERVE= PROM= RIG_UP=0 SA_MADE=0 LIB_STAGED=0
made=()      # device nodes and links this script created on the machine
made_dirs=() # directories it created, removed (when empty) at the end, innermost first

cleanup() {
  local p d i
  for p in $PROM $NV_SERVE $HY_SERVE; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [ "$RIG_UP" = 1 ]; then
    $KC delete pod -l app=rig-prometheus --wait=true --timeout=60s >/dev/null 2>&1
    if [ "$SA_MADE" = 1 ]; then
      $KC delete clusterrolebinding "$SA" --ignore-not-found >/dev/null 2>&1
      $KC delete clusterrole "$SA" --ignore-not-found >/dev/null 2>&1
      $KC -n default delete serviceaccount "$SA" --ignore-not-found >/dev/null 2>&1
    fi
    rig_down
  fi
  for p in "${made[@]}"; do rm -f "$p"; done
  [ "$LIB_STAGED" = 1 ] && rm -f "$LIB"
  for ((i = ${#made_dirs[@]} - 1; i >= 0; i--)); do rmdir "${made_dirs[$i]}" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up

# mkdirs DIR: DIR and its missing parents, each one made recorded in made_dirs.
mkdirs() {
  local d=$1 missing=()
  while [ ! -e "$d" ]; do missing=("$d" "${missing[@]}"); d=$(dirname "$d"); done
  for d in "${missing[@]}"; do mkdir "$d" && made_dirs+=("$d"); done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- 1. Prometheus from Debian.
echo "=== Prometheus from Debian"
apt-get update -qq >"$WORK/apt.log" 2>&1
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >>"$WORK/apt.log" 2>&1 \
  || { tail -5 "$WORK/apt.log"; echo "apt-get install prometheus failed"; exit 2; }
for svc in prometheus prometheus-node-exporter; do
  if [ -d /run/systemd/system ]; then
    systemctl disable --now "$svc" >/dev/null 2>&1
  elif [ -x "/etc/init.d/$svc" ]; then
    "/etc/init.d/$svc" stop >/dev/null 2>&1
    update-rc.d "$svc" disable >/dev/null 2>&1
  fi
done
echo "$(prometheus --version 2>&1 | head -1)"
echo "$(promtool --version 2>&1 | head -1)"

# --- 2. The chart's rules and dashboard.
echo "=== the chart rendered with its monitoring objects"
"$HELM" template dm "$REPO/deploy/helm/device-manager" --namespace gpustack-system \
  --api-versions monitoring.coreos.com/v1 \
  --set monitoring.podMonitor.enabled=true,monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true \
  >"$WORK/rendered.yaml" || { echo "helm template failed"; exit 2; }
python3 - "$WORK" <<'EOF' || exit 2
import json, sys, yaml
work = sys.argv[1]
docs = [d for d in yaml.safe_load_all(open(f"{work}/rendered.yaml")) if d]
kinds = sorted({d["kind"] for d in docs if d["kind"] in ("PodMonitor", "PrometheusRule")})
rule = next(d for d in docs if d["kind"] == "PrometheusRule")
yaml.safe_dump({"groups": rule["spec"]["groups"]}, open(f"{work}/rules.yaml", "w"), sort_keys=False)
board = next(d for d in docs if d["kind"] == "ConfigMap"
             and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1")
dash = json.loads(board["data"]["device-manager.json"])
queries, records = [], []
for panel in dash["panels"]:
    for t in panel.get("targets", []):
        expr = (t["expr"].replace("$__rate_interval", "1m")
                .replace("$manufacturer", ".*").replace("$node", ".*"))
        queries.append({"what": f'panel "{panel["title"]}" {t["refId"]}', "expr": expr})
        records.append({"record": f"rig:dashboard_query_{len(records) + 1}", "expr": expr})
for r in rule["spec"]["groups"][0]["rules"]:
    queries.append({"what": f'alert {r["alert"]}', "expr": r["expr"], "alert": r["alert"]})
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]},
               open(f"{work}/dashboard-rules.yaml", "w"), sort_keys=False)
json.dump(queries, open(f"{work}/queries.json", "w"))
print(f"rendered: {', '.join(kinds)}, ConfigMap {board['metadata']['name']} "
      f"(dashboard \"{dash['title']}\": {len(records)} queries in "
      f"{sum(1 for p in dash['panels'] if p.get('targets'))} panels); "
      f"{len(rule['spec']['groups'][0]['rules'])} alerts")
EOF
echo "promtool check rules (the PrometheusRule's, then the dashboard's queries as recording rules):"
promtool check rules "$WORK/rules.yaml" "$WORK/dashboard-rules.yaml" 2>&1 | sed 's/^/  /'
promtool check rules "$WORK/rules.yaml" "$WORK/dashboard-rules.yaml" >/dev/null 2>&1 \
  || fail "promtool check rules"

# --- 3. The hosts.
echo "=== the hosts"
NV_REC=$REPO/testdata/hosts/hgx-h100-8gpu-gpu3-remap-pending
LIVE=$WORK/nvidia-live
echo "stand-in preload library (rig-prometheus.sh)" >"$WORK/libvgpu.so"
cat /proc/sys/kernel/random/boot_id >"$WORK/boot_id"
python3 "$REPO/scripts/make-live-host.py" "$NV_REC" "$LIVE" --tool nvidia-smi=/usr/bin/nvidia-smi \
  --file "$WORK/libvgpu.so:$LIB" --file "$WORK/boot_id:/proc/sys/kernel/random/boot_id" \
  | sed 's/^/nvidia live host: /' || { echo "make-live-host failed"; exit 2; }
HY=$WORK/hygon-8x-bw150-mig
cp -a "$REPO/testdata/hosts/hygon-8x-bw150-mig" "$HY"
KMSG=$WORK/kmsg
: >"$KMSG"

rig_up "$WORK/rig"
RIG_UP=1
fresh_devices
$KC apply -f "$RIGSRC/nfd-crds.yaml" >/dev/null
# What the two daemons need of this machine, made now that the rig is ours: the slice library at
# its host path (the kubelet mounts it), Hygon's device-node aliases, its registry link.
if [ ! -e "$LIB" ]; then
  mkdirs "$(dirname "$LIB")"
  cp "$WORK/libvgpu.so" "$LIB" && LIB_STAGED=1
fi
[ -e /dev/dri ] || made_dirs+=(/dev/dri)
hygon_machine "$HY"
if [ -e /etc/dmi_mig_config ]; then
  fail "/etc/dmi_mig_config exists on this machine; not replacing it"
  verdict rig-prometheus
fi
ln -s "$HY/root/etc/dmi_mig_config" /etc/dmi_mig_config
made+=(/etc/dmi_mig_config)

# The Hygon daemon's ServiceAccount: what the chart grants but `Devices` (and NodeFeatures).
cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: ServiceAccount
metadata: {name: $SA, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: $SA}
rules:
  - {apiGroups: [""], resources: [nodes], verbs: [get]}
  - {apiGroups: [""], resources: [nodes/status], verbs: [get, patch]}
  - {apiGroups: [""], resources: [pods], verbs: [get, list, watch, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: $SA}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: $SA}
subjects: [{kind: ServiceAccount, name: $SA, namespace: default}]
EOT
SA_MADE=1
TOKEN=$($KC -n default create token "$SA" --duration=1h) || { fail "no token for $SA"; verdict rig-prometheus; }
cat >"$WORK/restricted.kubeconfig" <<EOT
apiVersion: v1
kind: Config
clusters: [{name: rig, cluster: {server: "https://127.0.0.1:6443", certificate-authority: $K/pki/ca.crt}}]
users: [{name: $SA, user: {token: "$TOKEN"}}]
contexts: [{name: $SA, context: {cluster: rig, user: $SA, namespace: default}}]
current-context: $SA
EOT
echo "ServiceAccount default/$SA: nodes get, nodes/status patch, pods get/list/watch/patch; no devices, no nodefeatures"

# --- 4. The daemons and Prometheus.
NV_PORT=$(free_port)
HY_PORT=$(free_port)
PROM_PORT=$(free_port)
D_NV=$WORK/nvidia-data
D_HY=$WORK/hygon-data
GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY=envvar RUST_LOG=info MALLOC_ARENA_MAX=1 \
  "$BIN" serve --manufacturer nvidia --node-name rig-node --host-root "$LIVE" --kubelet-dir $K/kubelet \
  --data-dir "$D_NV" --kmsg-path "$KMSG" --metrics-listen "127.0.0.1:$NV_PORT" --monitor-period 2s \
  >"$NV_LOG" 2>&1 &
NV_SERVE=$!
KUBECONFIG=$WORK/restricted.kubeconfig RUST_LOG=info MALLOC_ARENA_MAX=1 \
  "$BIN" serve --manufacturer hygon --node-name rig-node --host-root "$HY" --kubelet-dir $K/kubelet \
  --data-dir "$D_HY" --metrics-listen "127.0.0.1:$HY_PORT" --monitor-period 2s >"$HY_LOG" 2>&1 &
HY_SERVE=$!
echo "serve --manufacturer nvidia (pid $NV_SERVE) metrics at 127.0.0.1:$NV_PORT; serve --manufacturer hygon (pid $HY_SERVE, as $SA) at 127.0.0.1:$HY_PORT"

cat >"$WORK/prometheus.yml" <<EOT
global: {scrape_interval: 2s, evaluation_interval: 2s}
rule_files: [$WORK/rules.yaml]
scrape_configs:
  # As the chart's PodMonitor: the scraped labels win (the holding series' namespace, pod and
  # container), and each series names its node.
  - job_name: device-manager
    honor_labels: true
    static_configs: [{targets: ["127.0.0.1:$NV_PORT", "127.0.0.1:$HY_PORT"], labels: {node: rig-node}}]
  - job_name: kubelet
    scheme: https
    tls_config: {cert_file: $K/pki/admin.crt, key_file: $K/pki/admin.key, insecure_skip_verify: true}
    static_configs: [{targets: ["127.0.0.1:10250"], labels: {node: rig-node}}]
EOT
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$PROM_LOG" 2>&1 &
PROM=$!
API=http://127.0.0.1:$PROM_PORT
# prom PATH: Prometheus's answer at PATH (JSON), or nothing.
prom() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$API$1" 2>/dev/null; }
for _ in $(seq 1 60); do prom /-/ready >/dev/null && break; sleep 1; done
prom /-/ready >/dev/null || { fail "Prometheus is not ready (see $PROM_LOG)"; verdict rig-prometheus; }
echo "prometheus (pid $PROM) at $API: $(prom /api/v1/status/buildinfo | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["version"])')"

wait_alloc() { # RESOURCE N SECONDS
  for _ in $(seq 1 "$3"); do [ "$(allocatable "$1")" = "$2" ] && break; sleep 1; done
  echo "allocatable $1: $(allocatable "$1") (want $2)"
  [ "$(allocatable "$1")" = "$2" ] || fail "$1 is not $2"
}
wait_alloc nvidia.com/gpu 7 120
wait_alloc hygon.com/dcu.partitioned 32 120
for _ in $(seq 1 30); do [ -n "$(allocatable nvidia.com/gpu.sliced.memory-percentage)" ] && break; sleep 1; done
[ "$failed" = 0 ] || { tail -20 "$NV_LOG" "$HY_LOG" | cut -c1-300; verdict rig-prometheus; }

# --- 5. Pods of each family, a refusal, a hardware XID.
# pod NAME LIMITS: Pod NAME (label app=rig-prometheus), one busybox container `main`.
pod() {
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default, labels: {app: rig-prometheus}}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: localhost/rig/busybox:1.0
    imagePullPolicy: Never
    command: ["sh", "-c", "sleep 3600"]
    resources: {limits: $2}
EOT
}
# phase NAME: the Pod's phase once it is Running or Failed (60 s).
phase() {
  local p=""
  for _ in $(seq 1 60); do
    p=$($KC get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null)
    case "$p" in Running|Failed) break ;; esac
    sleep 1
  done
  echo "$p"
}
echo "=== Pods of each family"
S=nvidia.com/gpu.sliced
P=hygon.com/dcu.partitioned
pod rp-exclusive '{nvidia.com/gpu: "1"}'
pod rp-shared '{nvidia.com/gpu.shared: "1"}'
pod rp-sliced "{$S: \"1\", $S.memory-percentage: \"25\", $S.cores-percentage: \"50\", $S.units: \"400000\"}"
pod rp-partition "{$P: \"1\", $P.mig-2g.15gb: \"1\"}"
for p in rp-exclusive rp-shared rp-sliced rp-partition; do
  running "$p" 90 && echo "$p: Running"
done
echo "=== 60 % slices until one is admitted that no GPU has room for"
refused=""
for i in $(seq 1 8); do
  pod "rp-fill-$i" "{$S: \"1\", $S.memory-percentage: \"60\", $S.cores-percentage: \"100\", $S.units: \"960000\"}"
  ph=$(phase "rp-fill-$i")
  echo "rp-fill-$i: ${ph:-Pending} $($KC get pod "rp-fill-$i" -o jsonpath='{.status.reason}: {.status.message}' 2>/dev/null | cut -c1-200)"
  if [ "$ph" = Failed ]; then refused=rp-fill-$i; break; fi
  [ "$ph" = Running ] || break
done
[ -n "$refused" ] || fail "no 60 % slice was refused"
kernel_line "$KMSG" 900 "NVRM: Xid (PCI:0000:db:00): 79, pid=2231, name=python3, GPU has fallen off the bus."

# --- 6. The unhealthy alert fires; every query returns series.
echo "=== AcceleratorUnhealthy (for: 1m) on GPU 3"
firing=""
for _ in $(seq 1 180); do
  firing=$(prom /api/v1/alerts | python3 -c '
import json, sys
for a in json.load(sys.stdin)["data"]["alerts"]:
    if a["labels"]["alertname"] == "AcceleratorUnhealthy" and a["state"] == "firing":
        l = a["labels"]
        print("firing: %s %s index %s %s (%s) since %s" % (l["alertname"], l["manufacturer"], l["index"], l["uuid"], l.get("product"), a["activeAt"]))' 2>/dev/null)
  echo "$firing" | grep -q "index 3 GPU-8e70d727" && break
  sleep 1
done
echo "${firing:-AcceleratorUnhealthy is not firing}"
echo "$firing" | grep -q "index 3 GPU-8e70d727" || fail "AcceleratorUnhealthy does not fire for GPU 3"

# ask SKIP_ALERT: every query of queries.json but the alert SKIP_ALERT (and only it, with
# ONLY=1), one line each; fails the script for a query without series.
ask() {
  python3 - "$WORK/queries.json" "$API" "$1" "${2:-0}" <<'EOF'
import json, sys, urllib.parse, urllib.request
queries, api, skip, only = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
empty = 0
for q in queries:
    if (q.get("alert") == skip) != only:
        continue
    url = api + "/api/v1/query?" + urllib.parse.urlencode({"query": q["expr"]})
    try:
        answer = json.load(urllib.request.urlopen(url, timeout=10))
        n = len(answer["data"]["result"]) if answer["status"] == "success" else 0
    except Exception as e:  # an error answer is a query without series
        answer, n = {"error": str(e)}, 0
    one = " ".join(q["expr"].split())
    print("%-5s %3d series  %s: %s" % ("ok" if n else "EMPTY", n, q["what"], one[:110] + ("…" if len(one) > 110 else "")))
    empty += n == 0
sys.exit(1 if empty else 0)
EOF
}
echo "=== every dashboard query and alert expression (AcceleratorDetectionFailing after step 7)"
ask AcceleratorDetectionFailing || fail "a query returned no series"

echo "=== who holds what, as Prometheus has it (device_manager_ledger_holding)"
prom "/api/v1/query?query=device_manager_ledger_holding" | python3 -c '
import json, sys
for s in sorted(json.load(sys.stdin)["data"]["result"], key=lambda s: (s["metric"]["manufacturer"], int(s["metric"]["index"]))):
    m = s["metric"]
    print("  %s %s %s: %s/%s/%s %s%s" % (m["manufacturer"], m["index"], m["uuid"], m.get("namespace", ""), m.get("pod", ""), m.get("container", ""), m["family"], " " + m["profile"] if m.get("profile") else ""))'
for p in rp-exclusive rp-shared rp-sliced rp-partition; do
  n=$(prom "/api/v1/query?query=device_manager_ledger_holding%7Bnamespace%3D%22default%22%2Cpod%3D%22$p%22%2Ccontainer%3D%22main%22%7D" \
    | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]["result"]))')
  [ "$n" -ge 1 ] || fail "no holding series names default/$p/main"
done

echo "=== device-manager monitor, reading the NVIDIA daemon's ledger, the holders named by the kubelet"
"$BIN" monitor --host-root "$LIVE" --manufacturer nvidia --data-dir "$D_NV" --kubelet-dir $K/kubelet \
  >"$WORK/monitor.out" 2>"$WORK/monitor.err"
sed 's/^/  /' "$WORK/monitor.out" "$WORK/monitor.err"
for p in rp-exclusive rp-shared rp-sliced; do
  grep -q "default/$p/main" "$WORK/monitor.out" || fail "monitor does not name default/$p/main"
done

# --- 7. Detection fails.
echo "=== the NVIDIA driver wedged: its GPU listing unreadable, nvidia-smi gone; refresh"
mv "$LIVE/proc/driver/nvidia/gpus" "$LIVE/proc/driver/nvidia/gpus.away"
: >"$LIVE/proc/driver/nvidia/gpus"
mv "$LIVE/usr/bin/nvidia-smi" "$WORK/nvidia-smi.away"
"$BIN" refresh --data-dir "$D_NV" 2>&1 | cut -c1-300 | sed 's/^/  /'
for _ in $(seq 1 30); do
  [ "$(prom '/api/v1/query?query=device_manager_detection_failing%3D%3D1' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]["result"]))')" -ge 1 ] && break
  sleep 1
done
ask AcceleratorDetectionFailing 1 || fail "AcceleratorDetectionFailing returned no series"

if [ "$failed" = 1 ]; then
  echo "the daemons' logs (last lines):"
  tail -15 "$NV_LOG" | cut -c1-300 | sed 's/^/  nvidia: /'
  tail -15 "$HY_LOG" | cut -c1-300 | sed 's/^/  hygon: /'
fi
verdict rig-prometheus
