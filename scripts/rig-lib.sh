# rig-lib.sh — sourced by the rig scripts (scripts/rig-*.sh), never run: where things are, and
# the rig's bring-up and tear-down (../shared/rig). After it: HERE, REPO, RIGSRC, K, KUBECONFIG,
# KC and BIN are set, the binary and the rig are known to exist, and `failed` is 0.
HERE=$(cd "$(dirname "${BASH_SOURCE[1]:-$0}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
RIGSRC=${RIGSRC:-$REPO/../shared/rig}
K=/tmp/k8s
export KUBECONFIG=$K/kubeconfig
KC=$K/bin/kubectl
BIN=$(readlink -f "${BIN:-$REPO/target/$(uname -m)-unknown-linux-gnu/release/device-manager}")
[ -x "$BIN" ] || { echo "no binary $BIN (scripts/build-release.sh)"; exit 2; }
[ -x $K/up.sh ] || { echo "no rig at $K (run $RIGSRC/build.sh)"; exit 2; }
failed=0

# fail WHY: says it, and the script ends FAILED.
fail() { echo "FAIL: $*"; failed=1; }

# rig_up LOG: the API server with the controller-manager and the scheduler, then the node
# (kubelet and containerd); their output in LOG-up.log and LOG-node.log. Exits 2 if either fails.
# rig_up: one rig script at a time on this machine (the rig is one node and one etcd): the lock
# /tmp/rig.lock is held on descriptor 9 until the script exits, so a second script waits for it.
rig_up() {
  exec 9>/tmp/rig.lock
  flock 9
  # The rig's own processes outlive this script's lock only if they hold it: they get no copy.
  WITH_KCM=1 WITH_SCHED=1 $K/up.sh 9>&- >"$1-up.log" 2>&1 && $K/node-up.sh 9>&- >"$1-node.log" 2>&1 || {
    echo "rig did not come up ($1-*.log)"; exit 2; }
}

# rig_down: the node, then the control plane (the rig keeps its etcd data).
rig_down() { $K/node-down.sh >/dev/null 2>&1; $K/down.sh >/dev/null 2>&1; }

# fresh_devices: the Devices CRD as this checkout defines it (Helm installs crds/ once and never
# upgrades them, and the API server drops status fields an older CRD does not know:
# deploy/README.md, "Upgrading"), and nothing an earlier run left in etcd: rig-node's Devices
# object and the Node's Events.
fresh_devices() {
  $KC apply --server-side --force-conflicts -f "$REPO/deploy/helm/device-manager/crds/" >/dev/null
  $KC delete devices.gpustack.ai rig-node --ignore-not-found >/dev/null 2>&1
  $KC -n default delete events --field-selector involvedObject.kind=Node >/dev/null 2>&1
}

# kernel_line FILE SEQ TEXT: appends one /dev/kmsg record (priority 3) to FILE.
kernel_line() {
  echo "kernel log <- $3"
  printf '3,%s,%s,-;%s\n' "$2" "$(($(date +%s) * 1000000))" "$3" >>"$1"
}

# allocatable RESOURCE: rig-node's allocatable count of RESOURCE (dots escaped for jsonpath).
allocatable() {
  $KC get node rig-node -o jsonpath="{.status.allocatable.${1//./\\.}}" 2>/dev/null
}

# devices_faults PATTERN...: rig-node's Devices status.faults, waited for (30 s) until every
# PATTERN is in it; printed.
devices_faults() {
  local faults="" p ok
  for _ in $(seq 1 30); do
    faults=$($KC get devices.gpustack.ai rig-node -o jsonpath='{.status.faults}' 2>/dev/null)
    ok=1
    for p in "$@"; do echo "$faults" | grep -q "$p" || ok=0; done
    [ "$ok" = 1 ] && break
    sleep 1
  done
  echo "Devices rig-node status.faults: $faults"
  FAULTS=$faults
}

# node_events: the Events on Node rig-node, waited for (30 s) until a Warning is among them;
# printed, and kept in EVENTS.
node_events() {
  EVENTS=""
  for _ in $(seq 1 30); do
    EVENTS=$($KC -n default get events --field-selector involvedObject.kind=Node,involvedObject.name=rig-node \
      -o jsonpath='{range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}' 2>/dev/null)
    echo "$EVENTS" | grep -q Warning && break
    sleep 1
  done
  echo "Events on Node rig-node:"
  echo "$EVENTS" | sed 's/^/  /'
}

# busybox_pod NAME COMMAND LIMITS: applies Pod NAME (namespace default): one busybox container
# `c` running `sh -c COMMAND`, with resources.limits LIMITS (YAML flow: '{nvidia.com/gpu: "1"}'),
# on the host network unless POD_NETWORK=1.
busybox_pod() {
  local command host=true
  command=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$2")
  [ "${POD_NETWORK:-0}" = 1 ] && host=false
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  hostNetwork: $host
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: localhost/rig/busybox:1.0
    imagePullPolicy: Never
    command: ["sh", "-c", $command]
    resources: {limits: $3}
EOT
}

# running NAME [SECONDS]: waits (60 s unless told) for Pod NAME to be Ready; if it is not, says
# why, the script fails, and the answer is 1.
running() {
  $KC wait --for=condition=Ready "pod/$1" --timeout="${2:-60}s" >/dev/null 2>&1 && return 0
  echo "$1: NOT RUNNING: $($KC get pod "$1" -o jsonpath='{.status.reason}: {.status.message}')"
  failed=1
  return 1
}

# saw NAME: once Pod NAME runs, prints what its container printed (indented); 1 if it never ran.
saw() {
  running "$1" || return 1
  sleep 1
  echo "$1: Running; its container saw:"
  $KC logs "$1" 2>/dev/null | sed 's/^/    /'
}

# expect POD DESCRIPTION PATTERN [COUNT]: the Pod's output holds PATTERN (grep -E) COUNT times
# (1 unless told), else the script fails. EXPECT_BY says what is counted: `matches` (the
# default: every match, several on a line), `lines` (lines that match) or `words` (each
# blank-separated word matched on its own, so a pattern cannot eat the blank its neighbour
# needs: mxcd mxgd mxnd).
expect() {
  local n
  case "${EXPECT_BY:-matches}" in
    lines) n=$($KC logs "$1" 2>/dev/null | grep -cE "$3") ;;
    words) n=$($KC logs "$1" 2>/dev/null | tr ' ' '\n' | grep -cE "$3") ;;
    *) n=$($KC logs "$1" 2>/dev/null | grep -oE "$3" | wc -l) ;;
  esac
  if [ "$n" = "${4:-1}" ]; then echo "  ok: $2"; else echo "  WRONG: $2 (found $n of ${4:-1})"; failed=1; fi
}

# hygon_machine HOST: the nodes a Hygon responder names that this machine lacks, made as
# aliases of /dev/null (char 1:3) from the recording HOST's /dev listing (appended to `made`),
# and /opt/hyhal, /opt/dtk as empty directories where absent (appended to `made_dirs`). The
# caller removes both at the end; nothing here opens a node.
hygon_machine() {
  mkdir -p /dev/dri
  for n in $(cd "$1/root" && ls -d dev/kfd dev/mkfd dev/dri/card* dev/dri/renderD* | sed 's#^#/#'); do
    if [ ! -e "$n" ]; then
      mknod -m 0666 "$n" c 1 3
      made+=("$n")
    fi
  done
  for d in /opt/hyhal /opt/dtk; do
    if [ ! -e "$d" ]; then
      mkdir -p "$d"
      made_dirs+=("$d")
    fi
  done
}

# dra_rig: what the DRA scripts need besides the rig: the CDI-capable containerd built by
# scripts/rig-containerd.sh (CTRD2) and helm (HELM, else the one the deploy tests install under
# target/); exits 2 without either. Sets CDI, the runtime's CDI directory.
dra_rig() {
  CTRD2=$K/containerd2/bin
  [ -x "$CTRD2/containerd" ] || { echo "no CDI-capable containerd in $CTRD2 (scripts/rig-containerd.sh)"; exit 2; }
  HELM=${HELM:-$(ls "$REPO"/target/ci-helm-*/bin/helm 2>/dev/null | head -1)}
  [ -x "$HELM" ] || { echo "no helm (HELM=...; the deploy tests install one under target/)"; exit 2; }
  CDI=/var/run/cdi
}

# dra_down [POD...]: the one-daemon DRA scripts' clean-up: the Pods labelled app=$DRA_APP and
# the POD names given (device-plugin Pods carry no label), then the claims, the daemon $SERVE,
# the ResourceSlices and the chart's DeviceClasses, the rig, our CDI specs and $WORK.
dra_down() {
  $KC delete pod -l app=$DRA_APP --wait=true --timeout=60s >/dev/null 2>&1
  [ $# -gt 0 ] && $KC delete pod "$@" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1
  $KC delete resourceclaim -l app=$DRA_APP --wait=true --timeout=60s >/dev/null 2>&1
  [ -n "${SERVE:-}" ] && { kill "$SERVE" 2>/dev/null; wait "$SERVE" 2>/dev/null; }
  SERVE=""
  $KC delete resourceslices --all >/dev/null 2>&1
  $KC delete deviceclass -l app.kubernetes.io/name=device-manager >/dev/null 2>&1
  rig_down
  rm -f "$CDI"/gpustack-*.json
  rm -rf "$WORK"
}

# dra_classes [KEY=VALUE...]: the chart's DeviceClasses applied, rendered with dra.enabled and
# the values given.
dra_classes() {
  local sets=(--set dra.enabled=true) s
  for s in "$@"; do sets+=(--set "$s"); done
  "$HELM" template dm "$REPO/deploy/helm/device-manager" --api-versions resource.k8s.io/v1 \
    "${sets[@]}" -s templates/deviceclasses.yaml | $KC apply -f - >/dev/null ||
    fail "the chart's DeviceClasses were not applied"
}

# DRA (the rig-dra scripts): claim NAME CLASS [CEL [MEMORY CORES%]] applies a ResourceClaim of
# one request (MEMORY and CORES% as consumed capacity); claim_pod NAME CLAIM a Pod whose one
# container holds it and prints what it sees; allocated CLAIM the devices allocated to it. Both
# objects are labelled app=$DRA_APP (rig-dra unless set).
claim() {  # claim NAME CLASS [CEL [MEMORY CORES%]]: MEMORY and CORES% as consumed capacity
  local sel=""
  [ -n "${3:-}" ] && sel="
        selectors:
        - cel:
            expression: '$3'"
  [ -n "${4:-}" ] && sel="$sel
        capacity:
          requests:
            gpustack.ai/memory: $4
            gpustack.ai/coresPercentage: \"$5\""
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $1, namespace: default, labels: {app: ${DRA_APP:-rig-dra}}}
spec:
  devices:
    requests:
    - name: acc
      exactly:
        deviceClassName: $2$sel
EOT
}
claim_pod() {  # claim_pod NAME CLAIM
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default, labels: {app: ${DRA_APP:-rig-dra}}}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  resourceClaims:
  - {name: acc, resourceClaimName: $2}
  containers:
  - name: c
    image: localhost/rig/busybox:1.0
    imagePullPolicy: Never
    command: ["sh", "-c", "env | grep -E 'VISIBLE_DEVICES|CUDA_DEVICE' | sort; sleep 3600"]
    resources: {claims: [{name: acc}]}
EOT
}
allocated() { $KC get resourceclaim "$1" -o jsonpath='{.status.allocation.devices.results[*].device}' 2>/dev/null; }

# verdict NAME: prints NAME: OK or NAME: FAILED and exits with `failed`.
verdict() {
  if [ "$failed" = 0 ]; then echo "$1: OK"; else echo "$1: FAILED"; fi
  exit "$failed"
}
