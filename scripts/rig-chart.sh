#!/usr/bin/env bash
# rig-chart.sh — the Helm chart installed as an operator installs it, on the rig's real kubelet
# (../shared/rig), with an image built from the release binary:
#   1. `helm install` with deviceManager.hostRoot pointing at a copy of a recorded host
#      (testdata/hosts/hgx-h100-8gpu) and deviceManager.kubeletDir at the rig's kubelet;
#   2. the node advertises nvidia.com/gpu: 8 and a Pod asking for one runs with its GPU;
#   3. the worker's admission webhook, reached at a worker Pod's address, refuses a malformed
#      request with the seed's message (the API server cannot reach Services on the rig);
#   4. `helm upgrade` with a changed setting rolls the daemon with the new value (no duplicate
#      env entries), and the worker's Lease is handed over;
#   5. `helm uninstall` (its post-delete hook) leaves nothing of ours behind: no NodeFeature,
#      NodeFeatureRule, Lease, Devices, nor accelerator budget keys on the Node.
# With DRA=1 (issue 46) the node runs the CDI-capable containerd (scripts/rig-containerd.sh) and
# the release has dra.enabled=true: after step 2, the daemon Pod's driver publishes the node's
# ResourceSlice through the chart's RBAC (7 devices: gpu-pod's card withdrawn), the chart's
# DeviceClass nvidia.gpustack.ai serves a claim whose Pod sees another card through the CDI spec
# the daemon wrote into the chart's CDI mount; after the uninstall the kubelet wipes the slice
# of the driver gone.
#
#   scripts/build-release.sh
#   HELM=/path/to/helm scripts/rig-chart.sh          (DRA=1 scripts/rig-chart.sh for DRA)
#
# Needs root, the rig built (../shared/rig/build.sh), helm (HELM or PATH) and openssl. CI cannot
# run it: a person runs it and keeps what it printed. Leaves the rig stopped.
set -u
. "$(dirname "$0")/rig-lib.sh"
export PATH=$K/bin:$PATH
HELM=${HELM:-$(command -v helm || true)}
NS=gpustack-system
REL=dm
CHART=$REPO/deploy/helm/device-manager
IMAGE=localhost/rig/device-manager
TAG=rig
[ -n "$HELM" ] && [ -x "$HELM" ] || { echo "no helm (set HELM)"; exit 2; }

WORK=$(mktemp -d /tmp/rig-chart.XXXXXX)
chmod 755 "$WORK"
HOST=$WORK/hgx-h100-8gpu
cp -a "$REPO/testdata/hosts/hgx-h100-8gpu" "$HOST"

# --- the image: the release binary, the libraries it links, busybox for the image's scripts,
# and a stand-in preload library for the init container to stage.
echo "stand-in preload library (rig-chart.sh)" > "$WORK/libvgpu.so"
files=(--file "$BIN:/usr/local/bin/device-manager"
  --file "$REPO/deploy/image/stage-libraries:/usr/local/bin/stage-libraries"
  --file /bin/busybox:/bin/busybox --busybox-links
  --data "$WORK/libvgpu.so:/opt/gpustack/lib/cuda-13/libvgpu.so")
for lib in $(ldd "$BIN" | grep -o '/[^ ]*'); do
  files+=(--file "$(readlink -f "$lib"):$lib")
done
python3 "$RIGSRC/mkimage.py" --name "$IMAGE:$TAG" --out "$WORK/image.tar" "${files[@]}" \
  --dir /tmp --entrypoint /usr/local/bin/device-manager >/dev/null || { echo "mkimage failed"; exit 2; }

# --- the rig, the stand-in CRDs NFD and Kueue would bring, the node's PCI label NFD would set.
DRA=${DRA:-0}
if [ "$DRA" = 1 ]; then
  [ -x "$K/containerd2/bin/containerd" ] || { echo "no CDI-capable containerd (scripts/rig-containerd.sh)"; exit 2; }
  PATH=$K/containerd2/bin:$PATH rig_up "$WORK/rig"
else
  rig_up "$WORK/rig"
fi
teardown() {
  $KC delete pod,resourceclaim -l app=rig-chart-dra --wait=true --timeout=60s >/dev/null 2>&1
  "$HELM" uninstall $REL -n $NS --wait --timeout 2m >/dev/null 2>&1
  [ "$DRA" = 1 ] && { $KC delete resourceslices --all >/dev/null 2>&1; rm -f /var/run/cdi/gpustack-*.json; }
  rm -rf /var/lib/gpustack/operator/device-manager /var/lib/gpustack/operator/lib/cuda-13/libvgpu.so
  # The directories the chart's init container made for them, when nothing else is in them.
  rmdir -p /var/lib/gpustack/operator/lib/cuda-13 2>/dev/null
  $KC delete namespace $NS --ignore-not-found --wait=false >/dev/null 2>&1
  rig_down
  rm -rf "$WORK"
}
trap teardown EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
ctr --address $K/containerd/containerd.sock -n k8s.io images import "$WORK/image.tar" >/dev/null \
  || { echo "image import failed"; exit 2; }
$KC apply -f "$RIGSRC/nfd-crds.yaml" -f "$RIGSRC/kueue-crds.yaml" >/dev/null
# An earlier run's Devices CRD stays in etcd and Helm never upgrades crds/: apply this checkout's
# (deploy/README.md, "Upgrading").
$KC apply --server-side --force-conflicts -f "$CHART/crds/" >/dev/null
for _ in $(seq 1 60); do $KC get node rig-node >/dev/null 2>&1 && break; sleep 1; done
$KC label node rig-node feature.node.kubernetes.io/pci-10de.present=true --overwrite >/dev/null
# What daemons run outside the chart (the other rig scripts) left in etcd: the uninstall check
# below must see only what this release made.
$KC delete nodefeatures -n default rig-node-gpustack-device-manager --ignore-not-found >/dev/null 2>&1
$KC delete devices.gpustack.ai --all >/dev/null 2>&1
$KC create namespace $NS >/dev/null 2>&1

# --- the worker's serving certificate (deploy/README.md, "Without cert-manager"), valid for the
# Service name and for the worker Pods' addresses on the rig's bridge (10.88.0.0/24).
svc=gpustack-operator-device-manager-worker.$NS.svc
sans="DNS:$svc,DNS:$svc.cluster.local"
for i in $(seq 2 254); do sans="$sans,IP:10.88.0.$i"; done
(cd "$WORK" &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout ca.key -out ca.crt -subj "/CN=rig-chart-ca" 2>/dev/null &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout tls.key -out tls.csr -subj "/CN=$svc" 2>/dev/null &&
  openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile <(printf "subjectAltName=%s" "$sans") -out tls.crt 2>/dev/null) || { echo "openssl failed"; exit 2; }
# The rig keeps etcd's data between runs: a Secret left by an earlier run holds another CA's pair.
$KC -n $NS delete secret gpustack-operator-device-manager-worker-tls --ignore-not-found >/dev/null
$KC -n $NS create secret tls gpustack-operator-device-manager-worker-tls \
  --cert="$WORK/tls.crt" --key="$WORK/tls.key" >/dev/null

values=(--set image.repository=$IMAGE --set image.tag=$TAG --set image.pullPolicy=Never
  --set deviceManager.hostRoot="$HOST" --set deviceManager.kubeletDir=$K/kubelet
  --set webhook.certManager.enabled=false --set webhook.caBundle="$(base64 -w0 "$WORK/ca.crt")"
  --set cleanup.waitSeconds=60)
[ "$DRA" = 1 ] && values+=(--set dra.enabled=true)

echo "=== helm install (hostRoot=$HOST)"
"$HELM" install $REL "$CHART" -n $NS "${values[@]}" 2>&1 | sed -n '1,4p'
gpus() { $KC get node rig-node -o jsonpath='{.status.allocatable.nvidia\.com/gpu}' 2>/dev/null; }
for _ in $(seq 1 120); do [ "$(gpus)" = 8 ] && break; sleep 1; done
echo "node rig-node allocatable nvidia.com/gpu: $(gpus)"
[ "$(gpus)" = 8 ] || fail "the node does not advertise 8 GPUs"
$KC -n $NS get pods -o wide 2>&1 | sed 's/^/  /'
dm_pod=$($KC -n $NS get pods -l app.kubernetes.io/component=device-manager -o jsonpath='{.items[0].metadata.name}' 2>/dev/null)
echo "--- the daemon's log (first lines)"
$KC -n $NS logs "$dm_pod" -c device-manager 2>&1 | head -8 | cut -c1-220 | sed 's/^/  /'

echo "=== a Pod asking for one nvidia.com/gpu"
POD_NETWORK=1 busybox_pod gpu-pod "env | grep -E '^(NVIDIA|GPUSTACK)' | sort; sleep 3600" '{nvidia.com/gpu: "1"}'
if running gpu-pod; then
  echo "gpu-pod: Running; its container's environment:"
  sleep 1
  $KC logs gpu-pod 2>&1 | sed 's/^/  /'
  $KC logs gpu-pod 2>&1 | grep -q '^NVIDIA_VISIBLE_DEVICES=GPU-' || fail "gpu-pod has no GPU in NVIDIA_VISIBLE_DEVICES"
fi
held=$($KC logs gpu-pod 2>/dev/null | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p')
if [ "$DRA" = 1 ]; then
  echo "=== DRA through the chart"
  DRA_APP=rig-chart-dra
  slice_devices() { $KC get resourceslice rig-node-nvidia.gpustack.ai -o jsonpath='{.spec.devices[*].name}' 2>/dev/null; }
  for _ in $(seq 1 60); do [ "$(slice_devices | wc -w)" = 7 ] && break; sleep 1; done
  echo "DeviceClasses: $($KC get deviceclass -o jsonpath='{.items[*].metadata.name}')"
  echo "ResourceSlice rig-node-nvidia.gpustack.ai (written by the daemon Pod): $(slice_devices)"
  [ "$(slice_devices | wc -w)" = 7 ] || fail "the daemon Pod did not publish 7 devices (gpu-pod's card withdrawn)"
  claim chart-gpu nvidia.gpustack.ai
  claim_pod chart-dra chart-gpu
  if saw chart-dra; then
    got=$($KC logs chart-dra | sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p')
    echo "claim chart-gpu: allocated $(allocated chart-gpu) ($got); CDI specs: $(ls /var/run/cdi/gpustack-*.json 2>/dev/null | wc -l)"
    [ -n "$got" ] && [ "$got" != "$held" ] && echo "  ok: another card than gpu-pod's" || fail "the claim's Pod sees '$got' (gpu-pod holds $held)"
  fi
  $KC delete pod chart-dra --wait=true --timeout=60s >/dev/null 2>&1
  $KC delete resourceclaim chart-gpu --wait=true --timeout=60s >/dev/null 2>&1
fi
mode_of() { # the Devices status mode of accelerator $1 (by UUID)
  $KC get devices.gpustack.ai rig-node -o jsonpath="{.status.accelerators[?(@.uuid==\"$1\")].mode}" 2>/dev/null
}
for _ in $(seq 1 30); do [ "$(mode_of "$held")" = exclusive ] && break; sleep 1; done
echo "Devices status: $held is $(mode_of "$held") (gpu-pod keeps it across the upgrade below)"

echo "=== the admission webhook, at a worker Pod's address"
for _ in $(seq 1 60); do
  [ "$($KC -n $NS get pods -l app.kubernetes.io/component=worker -o jsonpath='{.items[*].status.containerStatuses[0].ready}')" = "true true" ] && break
  sleep 1
done
wip=$($KC -n $NS get pods -l app.kubernetes.io/component=worker -o jsonpath='{.items[0].status.podIP}')
echo "worker Pods ready; sending the webhooks to https://$wip:9443"
hooks=(mutatingwebhookconfiguration validatingwebhookconfiguration)
for kind in "${hooks[@]}"; do
  path=/validate-pods; [ $kind = mutatingwebhookconfiguration ] && path=/mutate-pods
  $KC patch $kind gpustack-operator-device-manager-worker --type=json -p "[
    {\"op\":\"remove\",\"path\":\"/webhooks/0/clientConfig/service\"},
    {\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/url\",\"value\":\"https://$wip:9443$path\"}]" >/dev/null
done
out=$(cat <<EOT | $KC apply -f - 2>&1
apiVersion: v1
kind: Pod
metadata: {name: two-slices, namespace: default, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  containers:
  - name: c
    image: localhost/rig/busybox:1.0
    resources:
      limits: {nvidia.com/gpu.sliced: "2", nvidia.com/gpu.sliced.memory-percentage: "50"}
EOT
)
echo "kubectl apply (a 2-accelerator slice): $out" | cut -c1-400
echo "$out" | grep -q "a logical slice request is always a single accelerator" \
  || fail "the webhook did not refuse the 2-accelerator slice with the seed's message"
# Back to the Service form the chart renders, so helm's three-way merge sees its own objects.
for kind in "${hooks[@]}"; do
  path=/validate-pods; [ $kind = mutatingwebhookconfiguration ] && path=/mutate-pods
  $KC patch $kind gpustack-operator-device-manager-worker --type=json -p "[
    {\"op\":\"remove\",\"path\":\"/webhooks/0/clientConfig/url\"},
    {\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/service\",\"value\":{\"name\":\"gpustack-operator-device-manager-worker\",\"namespace\":\"$NS\",\"path\":\"$path\",\"port\":443}}]" >/dev/null
done

echo "=== helm upgrade: GPUSTACK_NVIDIA_XID_APPLICATION=13,31"
holder() { $KC -n $NS get lease gpustack-device-manager-worker -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
before=$(holder)
if "$HELM" upgrade $REL "$CHART" -n $NS "${values[@]}" \
  --set settings.GPUSTACK_NVIDIA_XID_APPLICATION=13\\,31 --wait --timeout 3m >"$WORK/upgrade.log" 2>&1; then
  echo "helm upgrade: $(grep -m1 STATUS "$WORK/upgrade.log")"
else
  fail "helm upgrade failed: $(tail -2 "$WORK/upgrade.log")"
fi
dm_pod=$($KC -n $NS get pods -l app.kubernetes.io/component=device-manager -o jsonpath='{.items[0].metadata.name}')
env=$($KC -n $NS get pod "$dm_pod" -o jsonpath='{range .spec.containers[0].env[*]}{.name}={.value}{"\n"}{end}')
echo "daemon $dm_pod: $(echo "$env" | grep GPUSTACK_NVIDIA_XID_APPLICATION)"
echo "$env" | grep -qx 'GPUSTACK_NVIDIA_XID_APPLICATION=13,31' || fail "the daemon did not get the new setting"
dups=$(echo "$env" | cut -d= -f1 | sort | uniq -d)
[ -z "$dups" ] || fail "duplicate env names: $dups"
for _ in $(seq 1 60); do [ "$(gpus)" = 8 ] && break; sleep 1; done
echo "after the upgrade: allocatable nvidia.com/gpu: $(gpus)"
# One daemon per data directory: the new Pod holds the lock on the NVIDIA directory, which the
# upgrade kept where it was; the grant it replayed from the journal there is still published.
lock=/var/lib/gpustack/operator/device-manager/daemon.lock
echo "$lock: $(cat $lock 2>/dev/null)"
grep -q '^nvidia [0-9]' $lock 2>/dev/null || fail "the daemon does not hold its data directory's lock"
# The new daemon registered (allocatable is back) after replaying its journal; it compares the
# live Devices status with its own ledger and rewrites what differs, so give it a few publishing
# rounds: had it lost the grant, the GPU would read free.
sleep 10
echo "after the upgrade: Devices status: $held is $(mode_of "$held")"
[ -n "$held" ] && [ "$(mode_of "$held")" = exclusive ] || fail "gpu-pod's grant did not survive the upgrade"
$KC delete pod gpu-pod --wait=true --timeout=60s >/dev/null 2>&1
# The old leader released the Lease on its way out: a new replica holds it within seconds, not
# after the lease duration.
t=0
while [ $t -lt 30 ]; do now=$(holder); [ -n "$now" ] && [ "$now" != "$before" ] && break; sleep 1; t=$((t + 1)); done
echo "worker Lease holder before the upgrade: ${before:-none}; after: ${now:-none} (${t} s after the rollout)"
[ -n "$now" ] && [ "$now" != "$before" ] || fail "no new worker took the Lease"

left() { # what of ours is still in the cluster
  $KC get nodefeatures -A -o name 2>/dev/null | grep gpustack-device-manager
  $KC get nodefeaturerules -o name 2>/dev/null | grep gpustack-cpu-info
  $KC -n $NS get lease -o name 2>/dev/null | grep gpustack-device-manager
  $KC get devices.gpustack.ai -o name 2>/dev/null
  $KC get node rig-node -o json | python3 -c '
import json, sys
n = json.load(sys.stdin)
for k in n["status"].get("capacity", {}):
    if ".sliced." in k or ".partitioned." in k:
        print("node capacity key", k)
for k in n["metadata"].get("labels", {}):
    if k.startswith("device.gpustack.ai/") or "acceleratable" in k:
        print("node label", k)'
  $KC get pods -A -o name 2>/dev/null | grep -i device-manager
}
echo "=== helm uninstall"
present=$(left)
echo "of ours in the cluster before: $(echo "$present" | tr '\n' ' ')"
for kind in nodefeature.nfd lease.coordination devices.gpustack.ai; do # else the check below would prove nothing
  echo "$present" | grep -q "$kind" || fail "no $kind of ours before the uninstall"
done
"$HELM" uninstall $REL -n $NS --wait --timeout 3m 2>&1 | sed 's/^/  /'
for _ in $(seq 1 30); do [ -z "$(left)" ] && break; sleep 2; done
rest=$(left)
if [ "$DRA" = 1 ]; then
  # The kubelet wipes the slices of a driver that unregistered, 30 s after it went.
  for _ in $(seq 1 45); do $KC get resourceslice rig-node-nvidia.gpustack.ai >/dev/null 2>&1 || break; sleep 1; done
  if $KC get resourceslice rig-node-nvidia.gpustack.ai >/dev/null 2>&1; then
    rest="$rest
ResourceSlice rig-node-nvidia.gpustack.ai"
  else
    echo "the kubelet wiped the gone driver's ResourceSlice"
  fi
  rest=$(echo "$rest" | grep .)
fi
if [ -z "$rest" ]; then
  echo "nothing of ours is left (NodeFeatures, NodeFeatureRule, Lease, Devices, Node budget keys, Pods)"
else
  fail "left behind after uninstall:"; echo "$rest" | sed 's/^/  /'
fi

verdict rig-chart
