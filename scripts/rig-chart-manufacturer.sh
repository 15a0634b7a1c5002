#!/usr/bin/env bash
# rig-chart-manufacturer.sh M — the Helm chart installed for one manufacturer on the rig's real
# kubelet (../shared/rig), as shipped on a live node (issue 42 item 4; DESIGN.md, "As shipped, on
# a live node"):
#   1. the image laid out as the Dockerfile's runtime stage lays it out: the release binary,
#      stage-libraries, stand-in libvgpu.so files (cuda-12, cuda-13, iluvatar with its
#      ld.so.preload), busybox as the shell and the few tools Debian slim brings (sh, cp, cmp,
#      /usr/sbin/chroot, and what stage-libraries calls), user 65532; no vendor tool, no wrapper;
#   2. a live-looking host (scripts/make-live-host.py: the recording's root without its
#      recording mark, a static shell, the vendor's tool as a stand-in at a usual host path, the
#      staged libraries the init container would have staged there);
#   3. `helm install` with only M enabled (rows that create a RuntimeClass get runtimeHandler=runc:
#      the rig's containerd has only runc), hostRoot the live host, the rig's kubelet directory;
#      the node labelled with M's PCI vendor as NFD would; the kubelet's allocatable shows M's
#      resource (count = the recording's cards), and the daemon's first log lines are printed
#      (the tool found under the host root: no "not installed on the host");
#   4. one Pod of each family M serves on that host (exclusive, shared, sliced where the slice is
#      served on a live node with stand-in libraries), each container checked for the env,
#      device nodes and mounts its docs page names; the Devices status shows the grants; a Pod
#      with an owner container and the SSH visibility sidecar (`device.gpustack.ai/M.visibility`)
#      whose sidecar sees exactly the owner's grant;
#   5. `helm uninstall` leaves nothing of ours (rig-chart.sh's check, plus the RuntimeClass).
# Device nodes the responder names that this machine lacks are made as /dev/null aliases (T-Head:
# with the recorded major:minor), host directories the row mounts as type Directory are made
# empty; all of it, and whatever the release left under /var/lib/gpustack, removed at the end.
#
#   scripts/build-release.sh
#   HELM=/path/to/helm scripts/rig-chart-manufacturer.sh ascend
#   for m in nvidia amd ascend cambricon hygon iluvatar metax mthreads thead; do
#     scripts/rig-chart-manufacturer.sh $m; done
#
# Needs root, the rig built (../shared/rig/build.sh), helm (HELM, PATH, or the venv .ci/run makes
# in target/ci-helm-3.17.3.post1) and openssl. CI cannot run it. Leaves the rig stopped.
set -u
M=${1:-}
. "$(dirname "$0")/rig-lib.sh"
export PATH=$K/bin:$PATH
HELM=${HELM:-$(command -v helm || true)}
[ -n "$HELM" ] || HELM=$REPO/target/ci-helm-3.17.3.post1/bin/helm
[ -x "$HELM" ] || { echo "no helm (set HELM)"; exit 2; }
NS=gpustack-system
REL=dm
CHART=$REPO/deploy/helm/device-manager
IMAGE=localhost/rig/device-manager
TAG=rig
NAME=rig-chart-manufacturer
LIBDIR=/var/lib/gpustack/operator/lib
ALL=(nvidia amd ascend cambricon hygon iluvatar metax mthreads thead)

# --- M's row: the recording, where its tool stands on the live host (as the live_root test's
# NINE), its resource base, PCI vendor, card count, RuntimeClass (rows that create one), the
# exclusive and shared Pods' sizes, and whether a slice is run (else why not).
CLASS=""; EXCL=2; SHARE=1; SLICE=run
case "$M" in
  nvidia) HOSTREC=hgx-h100-8gpu; TOOL=nvidia-smi=/usr/bin/nvidia-smi; BASE=nvidia.com/gpu; VENDOR=10de; COUNT=8 ;;
  amd) HOSTREC=amd-8x-mi300x; TOOL=amd-smi=/opt/rocm/bin/amd-smi; BASE=amd.com/gpu; VENDOR=1002; COUNT=8 ;;
  ascend) HOSTREC=ascend-8x-910b2; TOOL=npu-smi=/usr/local/Ascend/driver/tools/npu-smi; BASE=huawei.com/npu
    VENDOR=19e5; COUNT=8; CLASS=ascend ;;
  cambricon) HOSTREC=cambricon-8x-mlu370-cnmon-v5; TOOL=cnmon=/usr/bin/cnmon; BASE=cambricon.com/mlu; VENDOR=cabc
    COUNT=8; SLICE="not run: a Cambricon slice is an sMLU instance cnmon makes and the driver lists in /proc/driver/cambricon, which a stand-in replaying by argv has no driver behind (scripts/rig-cambricon-smlu.sh runs it on the stateful recorded host)" ;;
  hygon) HOSTREC=hygon-4x-k100ai; TOOL=hy-smi=/opt/hyhal/bin/hy-smi; BASE=hygon.com/dcu; VENDOR=1d94; COUNT=4
    EXCL=1; SHARE=2 ;;
  iluvatar) HOSTREC=iluvatar-16x-bi-v150; TOOL=ixsmi=/usr/local/corex/bin/ixsmi; BASE=iluvatar.com/gpu; VENDOR=1e3e
    COUNT=16; CLASS=iluvatar ;;
  metax) HOSTREC=metax-8x-c500; TOOL=mx-smi=/opt/mxdriver/bin/mx-smi; BASE=metax-tech.com/gpu; VENDOR=9999; COUNT=8
    SLICE="not run: a MetaX slice is an sGPU subdevice the driver makes in sysfs (sgpu/), which a live-looking copy has no driver behind" ;;
  mthreads) HOSTREC=mthreads-8x-s4000; TOOL=mthreads-gmi=/usr/bin/mthreads-gmi; BASE=mthreads.com/gpu; VENDOR=1ed5
    COUNT=8; CLASS=mthreads ;;
  thead) HOSTREC=thead-16x-zw810e; TOOL=ppu-smi=/usr/local/PPU_SDK/ppu-smi/bin/ppu-smi; BASE=alibabacloud.com/ppu
    VENDOR=1ded; COUNT=16 ;;
  *) echo "usage: $0 {$(IFS='|'; echo "${ALL[*]}")}"; exit 2 ;;
esac
RECORDED=$REPO/testdata/hosts/$HOSTREC

WORK=$(mktemp -d /tmp/$NAME-$M.XXXXXX)
chmod 755 "$WORK"
LIVE=$WORK/live
made=()      # files and device nodes made on this machine, removed at the end
made_dirs=() # directories made on this machine (or by the kubelet for the row), removed at the end
label_made=0
# Host directories the row mounts (hostPaths, type Directory or DirectoryOrCreate), the Hygon
# driver directories its responder bind-mounts, Iluvatar's lock directory: whichever is absent
# now is the release's to remove at the end.
for d in /usr/local/Ascend /usr/local/dcmi /usr/local/neuware /opt/hyhal /opt/dtk /etc/dmi_mig_config \
  /usr/local/corex /opt/mxdriver /opt/maca /usr/local/PPU_SDK /tmp/vgpulock /dev/dri /var/lib/gpustack; do
  [ -e "$d" ] || made_dirs+=("$d")
done
before_gpustack=$(find /var/lib/gpustack 2>/dev/null | sort)

# --- the image, as the Dockerfile's runtime stage lays it out.
for d in cuda-12 cuda-13 iluvatar; do
  mkdir -p "$WORK/image/$d"
  echo "stand-in libvgpu.so ($d) from the image ($NAME.sh)" >"$WORK/image/$d/libvgpu.so"
done
files=(--file "$BIN:/usr/local/bin/device-manager"
  --file "$REPO/deploy/image/stage-libraries:/usr/local/bin/stage-libraries"
  --file /bin/busybox:/bin/busybox
  --data "$WORK/image/cuda-12/libvgpu.so:/opt/gpustack/lib/cuda-12/libvgpu.so"
  --data "$WORK/image/cuda-13/libvgpu.so:/opt/gpustack/lib/cuda-13/libvgpu.so"
  --data "$WORK/image/iluvatar/libvgpu.so:/opt/gpustack/lib/iluvatar/libvgpu.so"
  --data "$REPO/deploy/image/lib/iluvatar/ld.so.preload:/opt/gpustack/lib/iluvatar/ld.so.preload")
# Debian slim's sh, cp, cmp and /usr/sbin/chroot, and what stage-libraries runs.
for tool in /bin/sh /usr/bin/cp /usr/bin/cmp /usr/sbin/chroot /usr/bin/find /usr/bin/sort /usr/bin/mkdir \
  /usr/bin/dirname /usr/bin/chmod /usr/bin/mv /usr/bin/rm /usr/bin/cat /usr/bin/ls; do
  files+=(--symlink "$tool:/bin/busybox")
done
for lib in $(ldd "$BIN" 2>/dev/null | grep -o '/[^ ]*'); do
  files+=(--file "$(readlink -f "$lib"):$lib")
done
python3 "$RIGSRC/mkimage.py" --name "$IMAGE:$TAG" --out "$WORK/image.tar" "${files[@]}" \
  --dir /tmp --user 65532:65532 --entrypoint /usr/local/bin/device-manager >/dev/null || { echo "mkimage failed"; exit 2; }

# --- the live-looking host: the recording's root with the vendor's tool a stand-in at its host
# path, and what the init container stages (the image's libraries) already in its library
# directory, as on a node where the daemon's Pod ran before; plus M's own stand-in libraries,
# which the image does not build, in both places (the kubelet mounts them from this machine).
live_files=(--file "$WORK/image/cuda-12/libvgpu.so:$LIBDIR/cuda-12/libvgpu.so"
  --file "$WORK/image/cuda-13/libvgpu.so:$LIBDIR/cuda-13/libvgpu.so"
  --file "$WORK/image/iluvatar/libvgpu.so:$LIBDIR/iluvatar/libvgpu.so"
  --file "$REPO/deploy/image/lib/iluvatar/ld.so.preload:$LIBDIR/iluvatar/ld.so.preload")
# A live kernel's boot id (the recordings carry none; the daemon keys its fault memory by it).
cat /proc/sys/kernel/random/boot_id >"$WORK/boot_id"
live_files+=(--file "$WORK/boot_id:/proc/sys/kernel/random/boot_id")
own_libs=()
case $M in
  amd) own_libs=(amd/libvrocm.so amd/rocm-monitor amd/rocm-cumask-check) ;;
  ascend) own_libs=(ascend/cann-8-910b/lib/libvruntime.so ascend/cann-8-910b/tools/enpu-monitor) ;;
  thead) own_libs=(thead/hggc_quota.so thead/hgml_dlsym_hook.so thead/ppu-monitor thead/ld.so.preload) ;;
esac
for f in "${own_libs[@]}"; do
  mkdir -p "$(dirname "$WORK/libs/$f")"
  case $f in
    thead/ld.so.preload) printf '/usr/local/vppu/hgml_dlsym_hook.so\n/usr/local/vppu/hggc_quota.so\n' >"$WORK/libs/$f" ;;
    *) echo "stand-in $f ($NAME.sh)" >"$WORK/libs/$f" ;;
  esac
  live_files+=(--file "$WORK/libs/$f:$LIBDIR/$f")
  if [ ! -e "$LIBDIR/$f" ]; then
    mkdir -p "$(dirname "$LIBDIR/$f")"
    cp "$WORK/libs/$f" "$LIBDIR/$f"
    chmod 0644 "$LIBDIR/$f"
  fi
done
# Ascend: a live host whose chips already share (an operator ran `npu-smi set -t device-share …
# -d 1`): the stand-in answers the flag's reading, which the recording did not capture.
answers=()
if [ "$M" = ascend ]; then
  for card in $(seq 0 7); do
    a=$WORK/answers/device-share-$card
    mkdir -p "$a"
    printf 'npu-smi\ninfo\n-t\ndevice-share\n-i\n%s\n-c\n0\n' "$card" >"$a/argv"
    printf 'Device-share Status            : True\n' >"$a/stdout"
  done
  answers=(--answers "$WORK/answers")
fi
python3 "$REPO/scripts/make-live-host.py" "$RECORDED" "$LIVE" --tool "$TOOL" "${live_files[@]}" "${answers[@]}" \
  | sed 's/^/live host: /' || { echo "make-live-host failed"; exit 2; }
echo "live host $LIVE: $(ls "$LIVE" | tr '\n' ' ')(no recorded-host.json, no commands/)"

# --- this machine: the device nodes M's responder names, as /dev/null aliases where absent
# (T-Head's with the recorded major:minor, whose majors no driver here owns), and the row's
# Directory host paths made empty where absent.
alias_node() { # path [major minor]
  [ -e "$1" ] && return 0
  mkdir -p "$(dirname "$1")"
  mknod -m 0666 "$1" c "${2:-1}" "${3:-3}" && made+=("$1")
}
case $M in
  amd | metax | hygon | cambricon)
    for n in $(cd "$LIVE" && find dev -type f | sort | sed 's#^#/#'); do alias_node "$n"; done ;;
  thead)
    for major in $(cat "$LIVE"/dev/alixpu* | sed -n 's/^c \([0-9]*\):.*/\1/p' | sort -u); do
      if awk -v m="$major" '/^Block devices:/ {exit} $1 == m {found=1} END {exit !found}' /proc/devices; then
        echo "major $major is a driver's on this machine (/proc/devices); not aliasing it"; rm -rf "$WORK"; exit 2
      fi
    done
    for marker in "$LIVE"/dev/alixpu*; do
      # shellcheck disable=SC2046
      alias_node "/dev/$(basename "$marker")" $(sed -n 's/^c \([0-9]*\):\([0-9]*\)$/\1 \2/p' "$marker")
    done ;;
esac
case $M in
  ascend) mkdir -p /usr/local/Ascend ;;
  cambricon) mkdir -p /usr/local/neuware ;;
  hygon) mkdir -p /opt/hyhal /opt/dtk ;;
  iluvatar) mkdir -p /usr/local/corex ;;
  metax) mkdir -p /opt/mxdriver ;;
esac

# --- the rig, the stand-in CRDs NFD and Kueue would bring, the node's PCI label NFD would set.
left() { # what of ours is still in the cluster (rig-chart.sh's check, and the RuntimeClasses)
  $KC get nodefeatures -A -o name 2>/dev/null | grep gpustack-device-manager
  $KC get nodefeaturerules -o name 2>/dev/null | grep gpustack-cpu-info
  $KC -n $NS get lease -o name 2>/dev/null | grep gpustack-device-manager
  $KC get devices.gpustack.ai -o name 2>/dev/null
  $KC get runtimeclass -l device.gpustack.ai/manufacturer -o name 2>/dev/null
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
rig_up "$WORK/rig"
teardown() {
  "$HELM" uninstall $REL -n $NS --wait --timeout 2m >/dev/null 2>&1
  $KC delete pod --all -n default --wait=false >/dev/null 2>&1
  [ "$label_made" = 1 ] && $KC label node rig-node "feature.node.kubernetes.io/pci-$VENDOR.present-" >/dev/null 2>&1
  $KC delete namespace $NS --ignore-not-found --wait=false >/dev/null 2>&1
  rig_down
  for m in "${made[@]}"; do rm -f "$m"; done
  # What the release left under /var/lib/gpustack (data directory, staged libraries): removed.
  find /var/lib/gpustack -depth 2>/dev/null | while read -r p; do
    echo "$before_gpustack" | grep -qxF "$p" || rm -rf "$p"
  done
  for d in "${made_dirs[@]}"; do rm -rf "$d"; done
  rm -rf "$WORK"
}
trap teardown EXIT
trap 'exit 143' INT TERM HUP  # a signal ends the script through its EXIT clean-up
ctr --address $K/containerd/containerd.sock -n k8s.io images import "$WORK/image.tar" >/dev/null \
  || { echo "image import failed"; exit 2; }
$KC apply -f "$RIGSRC/nfd-crds.yaml" -f "$RIGSRC/kueue-crds.yaml" >/dev/null
fresh_devices
for _ in $(seq 1 60); do $KC get node rig-node >/dev/null 2>&1 && break; sleep 1; done
key=feature.node.kubernetes.io/pci-$VENDOR.present
if [ -z "$($KC get node rig-node -o jsonpath="{.metadata.labels.${key//./\\.}}")" ]; then label_made=1; fi
$KC label node rig-node "$key=true" --overwrite >/dev/null
$KC delete nodefeatures -n default rig-node-gpustack-device-manager --ignore-not-found >/dev/null 2>&1
$KC delete pod --all -n default --wait=true --timeout=60s >/dev/null 2>&1
# A RuntimeClass another rig script made and left (rig-ascend.sh, rig-ixmt.sh) would keep Helm
# from creating the chart's.
if [ -n "$CLASS" ] && $KC get runtimeclass "$CLASS" >/dev/null 2>&1; then
  echo "RuntimeClass $CLASS left by another run: deleted"
  $KC delete runtimeclass "$CLASS" >/dev/null
fi
$KC create namespace $NS >/dev/null 2>&1

# --- the worker's serving certificate (as rig-chart.sh: deploy/README.md, "Without cert-manager").
svc=gpustack-operator-device-manager-worker.$NS.svc
(cd "$WORK" &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout ca.key -out ca.crt -subj "/CN=$NAME-ca" 2>/dev/null &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout tls.key -out tls.csr -subj "/CN=$svc" 2>/dev/null &&
  openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile <(printf "subjectAltName=DNS:%s,DNS:%s.cluster.local" "$svc" "$svc") -out tls.crt 2>/dev/null) \
  || { echo "openssl failed"; exit 2; }
$KC -n $NS delete secret gpustack-operator-device-manager-worker-tls --ignore-not-found >/dev/null
$KC -n $NS create secret tls gpustack-operator-device-manager-worker-tls \
  --cert="$WORK/tls.crt" --key="$WORK/tls.key" >/dev/null

values=(--set image.repository=$IMAGE --set image.tag=$TAG --set image.pullPolicy=Never
  --set deviceManager.hostRoot="$LIVE" --set deviceManager.kubeletDir=$K/kubelet
  --set webhook.certManager.enabled=false --set webhook.caBundle="$(base64 -w0 "$WORK/ca.crt")"
  --set cleanup.waitSeconds=60 --set "global.manufacturers.$M.enabled=true")
for o in "${ALL[@]}"; do
  [ "$o" = "$M" ] || values+=(--set "global.manufacturers.$o.enabled=false")
done
[ -n "$CLASS" ] && values+=(--set "global.manufacturers.$M.runtimeHandler=runc")

echo "=== helm install: only $M enabled (hostRoot=$LIVE)"
"$HELM" install $REL "$CHART" -n $NS "${values[@]}" 2>&1 | sed -n '1,4p'
[ -n "$CLASS" ] && echo "RuntimeClass: $($KC get runtimeclass "$CLASS" -o jsonpath='{.metadata.name} handler={.handler}' 2>&1)"
for _ in $(seq 1 180); do
  [ "$(allocatable "$BASE")" = "$COUNT" ] && { [ "$SLICE" != run ] || [ -n "$(allocatable "$BASE.sliced")" ]; } && break
  sleep 1
done
echo "node rig-node allocatable: $BASE $(allocatable "$BASE"), .shared $(allocatable "$BASE.shared"), .sliced $(allocatable "$BASE.sliced"), device.gpustack.ai/$M.visibility $(allocatable "device.gpustack.ai/$M.visibility")"
[ "$(allocatable "$BASE")" = "$COUNT" ] || fail "the node does not advertise $COUNT $BASE"
[ "$SLICE" != run ] || [ -n "$(allocatable "$BASE.sliced")" ] || fail "no $BASE.sliced although its library is staged"
$KC -n $NS get pods -o wide 2>&1 | awk '{print "  " $1, $2, $3, $4, $5}'
dm_pod=$($KC -n $NS get pods -l app.kubernetes.io/component=device-manager -o jsonpath='{.items[0].metadata.name}' 2>/dev/null)
echo "--- the init container (stage-libraries)"
$KC -n $NS logs "$dm_pod" -c stage-libraries 2>&1 | tail -5 | sed 's/^/  /'
echo "--- the daemon's log (first lines)"
$KC -n $NS logs "$dm_pod" -c device-manager 2>&1 | head -12 | cut -c1-240 | sed 's/^/  /'
if $KC -n $NS logs "$dm_pod" -c device-manager 2>&1 | grep -q "not installed on the host"; then
  fail "the daemon did not find ${TOOL%%=*} under the host root:"
  $KC -n $NS logs "$dm_pod" -c device-manager 2>&1 | grep "not installed on the host" | head -3 | cut -c1-300 | sed 's/^/  /'
else
  echo "  ok: no \"not installed on the host\" in the daemon's log (${TOOL%%=*} found at ${TOOL#*=} under the host root)"
fi

# --- the families' Pods: each container prints what it sees (env, device nodes, mounts).
SHOW='env | grep -E "^(NVIDIA_|CUDA_|LIBCUDA_|AMD_|ROCR_|HSA_|VROCM_|ASCEND_|ENPU_|CAMBRICON_|HYGON|DMI_|HIP_|IX_|METAX_|MTHREADS_|HGGC_|LIBHGGC_)" | sort | sed "s/^/env /"
for f in /dev/* /dev/dri/*; do [ -c "$f" ] && [ ! -L "$f" ] || continue; case ${f#/dev/} in null|zero|full|random|urandom|tty|console|ptmx) continue;; esac; echo "dev ${f#/dev/} $(ls -l "$f" | awk "{print \$5 \$6}")"; done
for f in /usr/local/vgpu/libvgpu.so /usr/local/vgpu/pod /usr/local/vrocm/* /opt/enpu/vcann-rt/lib/* /opt/enpu/vcann-rt/tools/* /opt/hyhal /opt/hygondriver /etc/vdev/docker /tmp/vgpu /tmp/vgpulock /usr/local/vppu/* /var/run/vppu; do [ -e "$f" ] && echo "mounted $f"; done
[ -e /usr/local/vgpu/libvgpu.so ] && echo "content $(head -1 /usr/local/vgpu/libvgpu.so)"
[ -e /etc/ld.so.preload ] && sed "s/^/preload /" /etc/ld.so.preload
for f in /etc/enpu/vcann-rt/npu_info.config /etc/vdev/docker/vdev0.conf; do [ -e "$f" ] && sed "s/^/conf /" "$f"; done
touch /var/run/vppu/probe 2>/dev/null && echo "writable /var/run/vppu"
touch /etc/vdev/docker/probe 2>/dev/null && echo "writable /etc/vdev/docker"
sleep 3600'
pod() { # name limits(yaml flow) [second container's limits]: runs it, prints what its containers saw
  local command rc="" second=""
  command=$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$SHOW")
  [ -n "$CLASS" ] && rc="runtimeClassName: $CLASS"
  [ -n "${3:-}" ] && second="  - {name: ssh, image: localhost/rig/busybox:1.0, imagePullPolicy: Never, command: [\"sh\", \"-c\", $command], resources: {limits: $3}}"
  cat <<EOT | $KC apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  $rc
  containers:
  - {name: c, image: localhost/rig/busybox:1.0, imagePullPolicy: Never, command: ["sh", "-c", $command], resources: {limits: $2}}
$second
EOT
  running "$1" 90 || return 1
  sleep 1
  echo "$1${rc:+ ($rc)}: Running; its container saw:"
  $KC logs "$1" -c c 2>/dev/null | cut -c1-200 | sed 's/^/    /'
}
EXPECT_BY=lines
slice_limits() { # memory% cores%
  echo "{$BASE.sliced: \"1\", $BASE.sliced.memory-percentage: \"$1\", $BASE.sliced.cores-percentage: \"$2\", $BASE.sliced.units: \"$(($1 * 16000))\"}"
}
P=$M
echo "=== $P-exclusive: $EXCL $BASE"
pod $P-exclusive "{$BASE: \"$EXCL\"}"
echo "=== $P-shared: $SHARE $BASE.shared"
pod $P-shared "{$BASE.shared: \"$SHARE\"}"
case $M in
  nvidia) SL=(25 50) ;; amd) SL=(25 25) ;; ascend) SL=(25 30) ;; hygon) SL=(50 50) ;;
  iluvatar) SL=(50 25) ;; mthreads) SL=(50 8) ;; thead) SL=(25 100) ;; *) SL=() ;;
esac
if [ "$SLICE" = run ]; then
  echo "=== $P-sliced: one $BASE.sliced, ${SL[0]} % memory, ${SL[1]} % cores"
  pod $P-sliced "$(slice_limits "${SL[0]}" "${SL[1]}")"
else
  echo "=== $P-sliced: $SLICE"
fi

ids() { # pod pattern: the distinct values/nodes a Pod's lines hold
  $KC logs "$1" -c c 2>/dev/null | grep -E "$2" | sort -u | wc -l
}
case $M in
  nvidia)
    expect $P-exclusive "NVIDIA_VISIBLE_DEVICES names two GPUs" '^env NVIDIA_VISIBLE_DEVICES=GPU-[0-9a-f-]+,GPU-[0-9a-f-]+$'
    expect $P-exclusive "no device node, no slicing variable (the NVIDIA runtime injects)" '^(dev |env CUDA_)' 0
    expect $P-shared "NVIDIA_VISIBLE_DEVICES names one GPU" '^env NVIDIA_VISIBLE_DEVICES=GPU-[0-9a-f-]+$'
    expect $P-sliced "NVIDIA_VISIBLE_DEVICES names one GPU" '^env NVIDIA_VISIBLE_DEVICES=GPU-[0-9a-f-]+$'
    expect $P-sliced "CUDA_DEVICE_MEMORY_LIMIT_0 (25 % of the H100's VRAM)" '^env CUDA_DEVICE_MEMORY_LIMIT_0=2[0-9]{4}m$'
    expect $P-sliced "CUDA_DEVICE_SM_LIMIT=50" '^env CUDA_DEVICE_SM_LIMIT=50$'
    expect $P-sliced "LIBCUDA_LOG_LEVEL=0, CUDA_DEVICE_ORDER=PCI_BUS_ID" '^env (LIBCUDA_LOG_LEVEL=0|CUDA_DEVICE_ORDER=PCI_BUS_ID)$' 2
    expect $P-sliced "the shared cache in the Pod's directory" '^env CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/pod/c\.cache$'
    expect $P-sliced "libvgpu.so and the Pod's directory mounted" '^mounted /usr/local/vgpu/(libvgpu\.so|pod)$' 2
    expect $P-sliced "libvgpu.so is the image's CUDA 13 build, staged by the init container" '^content stand-in libvgpu\.so \(cuda-13\) from the image'
    expect $P-sliced "/etc/ld.so.preload names it" '^preload /usr/local/vgpu/libvgpu\.so$' ;;
  amd)
    expect $P-exclusive "/dev/kfd" '^dev kfd '
    expect $P-exclusive "two card nodes" '^dev dri/card[0-9]+ ' 2
    expect $P-exclusive "two render nodes" '^dev dri/renderD[0-9]+ ' 2
    expect $P-exclusive "AMD_VISIBLE_DEVICES=none" '^env AMD_VISIBLE_DEVICES=none$'
    expect $P-shared "/dev/kfd" '^dev kfd '
    expect $P-shared "one card node" '^dev dri/card[0-9]+ ' 1
    expect $P-shared "one render node" '^dev dri/renderD[0-9]+ ' 1
    expect $P-sliced "ROCR_VISIBLE_DEVICES names one GPU- id" '^env ROCR_VISIBLE_DEVICES=GPU-[0-9a-fA-F-]+$'
    expect $P-sliced "VROCM_DEVICE_MEMORY_LIMIT_0" '^env VROCM_DEVICE_MEMORY_LIMIT_0=[0-9]+$'
    expect $P-sliced "HSA_CU_MASK" '^env HSA_CU_MASK=0:[0-9]+-[0-9]+$'
    expect $P-sliced "libvrocm.so and its two tools mounted" '^mounted /usr/local/vrocm/(libvrocm\.so|rocm-monitor|rocm-cumask-check)$' 3
    expect $P-sliced "/etc/ld.so.preload names libvrocm.so" '^preload /usr/local/vrocm/libvrocm\.so$' ;;
  ascend)
    expect $P-exclusive "ASCEND_VISIBLE_DEVICES names two of the host's physical ids (0-7)" '^env ASCEND_VISIBLE_DEVICES=[0-7],[0-7]$'
    expect $P-exclusive "nothing else (the Ascend runtime injects the nodes)" '^(env |dev )' 1
    expect $P-shared "ASCEND_VISIBLE_DEVICES names one physical id (the chip's flag reads on)" '^env ASCEND_VISIBLE_DEVICES=[0-7]$'
    expect $P-sliced "ASCEND_VISIBLE_DEVICES names one physical id" '^env ASCEND_VISIBLE_DEVICES=[0-7]$'
    expect $P-sliced "ENPU_LOG_LEVEL=1, ENPU_DSMI_HOOK=1" '^env ENPU_(LOG_LEVEL|DSMI_HOOK)=1$' 2
    expect $P-sliced "npu_info.config: 30 % of the AI cores" '^conf aicore-quota=30$'
    expect $P-sliced "npu_info.config: 25 % of 65536 MiB" '^conf memory-quota=16384$'
    expect $P-sliced "npu_info.config names a physical id" '^conf physical-npu-id=[0-7]$'
    expect $P-sliced "vcann-rt and its reader mounted" '^mounted /opt/enpu/vcann-rt/(lib/libvruntime\.so|tools/enpu-monitor)$' 2
    expect $P-sliced "/etc/ld.so.preload: libdcmi.so in its two places, then libvruntime.so" '^preload /(usr/local/dcmi/libdcmi\.so|usr/local/Ascend/driver/lib64/driver/libdcmi\.so|opt/enpu/vcann-rt/lib/libvruntime\.so)$' 3 ;;
  cambricon)
    expect $P-exclusive "two card nodes" '^dev cambricon_dev[0-9]+ ' 2
    expect $P-exclusive "their IPC nodes" '^dev cambricon_ipcm[0-9]+ ' 2
    expect $P-exclusive "their message control nodes" '^dev cmsg_ctrl[0-9]+ ' 2
    expect $P-exclusive "the control node once" '^dev cambricon_ctl ' 1
    expect $P-exclusive "CAMBRICON_VISIBLE_DEVICES names two driver indexes" '^env CAMBRICON_VISIBLE_DEVICES=[0-9]+,[0-9]+$'
    expect $P-shared "one card node" '^dev cambricon_dev[0-9]+ ' 1
    expect $P-shared "the control node" '^dev cambricon_ctl ' 1
    expect $P-shared "CAMBRICON_VISIBLE_DEVICES names one driver index" '^env CAMBRICON_VISIBLE_DEVICES=[0-9]+$' ;;
  hygon)
    expect $P-exclusive "/dev/kfd and /dev/mkfd" '^dev m?kfd ' 2
    expect $P-exclusive "one card node" '^dev dri/card[0-9]+ ' 1
    expect $P-exclusive "one render node" '^dev dri/renderD[0-9]+ ' 1
    expect $P-exclusive "/opt/hyhal mounted" '^mounted /opt/hyhal$'
    expect $P-exclusive "no injected variable" '^env ' 0
    expect $P-shared "two card nodes" '^dev dri/card[0-9]+ ' 2
    expect $P-shared "two render nodes" '^dev dri/renderD[0-9]+ ' 2
    expect $P-sliced "one card node" '^dev dri/card[0-9]+ ' 1
    expect $P-sliced "vdev0.conf names a PciBusId" '^conf PciBusId: [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$'
    expect $P-sliced "two cu_mask lines" '^conf cu_mask: 0x[0-9a-f]{16}$' 2
    expect $P-sliced "cu_count 60 (half of 120)" '^conf cu_count: 60$'
    expect $P-sliced "/opt/hygondriver mounted" '^mounted /opt/hygondriver$'
    expect $P-sliced "the vdev.conf directory is read-only" '^writable /etc/vdev/docker$' 0 ;;
  iluvatar)
    expect $P-exclusive "IX_VISIBLE_DEVICES names two UUIDs" '^env IX_VISIBLE_DEVICES=GPU-[0-9a-fA-F-]+,GPU-[0-9a-fA-F-]+$'
    expect $P-exclusive "nothing but IX_VISIBLE_DEVICES, no node" '^(env |dev )' 1
    expect $P-shared "IX_VISIBLE_DEVICES names one UUID" '^env IX_VISIBLE_DEVICES=GPU-[0-9a-fA-F-]+$'
    expect $P-sliced "CUDA_DEVICE_SM_LIMIT=25" '^env CUDA_DEVICE_SM_LIMIT=25$'
    expect $P-sliced "CUDA_DEVICE_MEMORY_LIMIT_0=16384m" '^env CUDA_DEVICE_MEMORY_LIMIT_0=16384m$'
    expect $P-sliced "the shared cache variable" '^env CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/vgpu/cudevshr\.cache$'
    expect $P-sliced "LIBCUDA_LOG_LEVEL=0" '^env LIBCUDA_LOG_LEVEL=0$'
    expect $P-sliced "libvgpu.so, /tmp/vgpu and /tmp/vgpulock mounted" '^mounted /(usr/local/vgpu/libvgpu\.so|tmp/vgpu|tmp/vgpulock)$' 3
    expect $P-sliced "libvgpu.so is the image's Iluvatar build, staged by the init container" '^content stand-in libvgpu\.so \(iluvatar\) from the image'
    expect $P-sliced "/etc/ld.so.preload (the image's) names it" '^preload /usr/local/vgpu/libvgpu\.so$' ;;
  metax)
    expect $P-exclusive "the three control nodes" '^dev mx[cng]d ' 3
    expect $P-exclusive "two card nodes" '^dev dri/card[0-9]+ ' 2
    expect $P-exclusive "two render nodes" '^dev dri/renderD[0-9]+ ' 2
    expect $P-exclusive "no variable" '^env ' 0
    expect $P-shared "the three control nodes" '^dev mx[cng]d ' 3
    expect $P-shared "one card node" '^dev dri/card[0-9]+ ' 1
    expect $P-shared "one render node" '^dev dri/renderD[0-9]+ ' 1 ;;
  mthreads)
    expect $P-exclusive "MTHREADS_VISIBLE_DEVICES names two UUIDs" '^env MTHREADS_VISIBLE_DEVICES=[0-9a-f]{8}-[0-9a-f-]+,[0-9a-f]{8}-[0-9a-f-]+$'
    expect $P-exclusive "nothing but MTHREADS_VISIBLE_DEVICES, no node" '^(env |dev )' 1
    expect $P-shared "MTHREADS_VISIBLE_DEVICES names one UUID" '^env MTHREADS_VISIBLE_DEVICES=[0-9a-f]{8}-[0-9a-f-]+$'
    expect $P-sliced "MTHREADS_QOS_MEMORY_LIMIT in bytes" '^env MTHREADS_QOS_MEMORY_LIMIT=25769803776$'
    expect $P-sliced "MTHREADS_QOS_COMPUTING_POWER_WEIGHT=8" '^env MTHREADS_QOS_COMPUTING_POWER_WEIGHT=8$'
    expect $P-sliced "nothing mounted" '^mounted ' 0 ;;
  thead)
    expect $P-exclusive "/dev/alixpu (509, minor 0)" '^dev alixpu 509,0$'
    expect $P-exclusive "/dev/alixpu_ctl" '^dev alixpu_ctl '
    expect $P-exclusive "two card nodes" '^dev alixpu_ppu[0-9]+ ' 2
    expect $P-exclusive "no HGGC variable" '^env ' 0
    expect $P-shared "one card node" '^dev alixpu_ppu[0-9]+ ' 1
    expect $P-shared "both control nodes" '^dev alixpu(_ctl)? ' 2
    for p in $P-exclusive $P-shared; do
      bad=$($KC logs $p -c c 2>/dev/null | awk '$1 == "dev" && $2 ~ /^alixpu_ppu[0-9]+$/ { n = substr($2, 11) + 1; split($3, mm, ","); if (mm[2] != n) print $2, $3 }')
      [ -z "$bad" ] && echo "  ok: $p: every card node carries minor ordinal+1" || fail "$p: minors $bad"
    done
    expect $P-sliced "one card node" '^dev alixpu_ppu[0-9]+ ' 1
    expect $P-sliced "HGGC_DEVICE_SM_LIMIT=100" '^env HGGC_DEVICE_SM_LIMIT=100$'
    expect $P-sliced "HGGC_DEVICE_MEMORY_LIMIT_0 in bare MiB" '^env HGGC_DEVICE_MEMORY_LIMIT_0=24576$'
    expect $P-sliced "HGGC_LEDGER_PATH, LIBHGGC_LOG_LEVEL=1" '^env (HGGC_LEDGER_PATH=/var/run/vppu/ledger|LIBHGGC_LOG_LEVEL=1)$' 2
    expect $P-sliced "the shim pair and ppu-monitor mounted" '^mounted /usr/local/vppu/(hggc_quota\.so|hgml_dlsym_hook\.so|ppu-monitor)$' 3
    expect $P-sliced "ld.so.preload names the pair" '^preload /usr/local/vppu/(hgml_dlsym_hook|hggc_quota)\.so$' 2
    expect $P-sliced "its ledger directory is writable" '^writable /var/run/vppu$' ;;
esac

# --- the Devices object's status: the grants, by mode.
want_ex=$EXCL want_sh=$SHARE want_sl=0
[ "$SLICE" = run ] && want_sl=1
modes() { $KC get devices.gpustack.ai rig-node -o jsonpath='{range .status.accelerators[*]}{.mode}{"\n"}{end}' 2>/dev/null | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}'; }
count() { local n; n=$(echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"); echo "${n:-0}"; }
for _ in $(seq 1 30); do
  m=$(modes)
  [ "$(count "$m" exclusive)" = $want_ex ] && [ "$(count "$m" shared)" = $want_sh ] && [ "$(count "$m" sliced)" = $want_sl ] && break
  sleep 1
done
echo "Devices rig-node status, accelerators by mode: $m"
[ "$(count "$m" exclusive)" = $want_ex ] || fail "Devices status: $want_ex exclusive expected"
[ "$(count "$m" shared)" = $want_sh ] || fail "Devices status: $want_sh shared expected"
[ "$(count "$m" sliced)" = $want_sl ] || fail "Devices status: $want_sl sliced expected"
$KC delete pod $P-exclusive $P-shared $P-sliced --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1

# --- the SSH visibility sidecar: it sees exactly its owner's grant.
echo "=== $P-sidecar: container c asks 1 $BASE, container ssh 1 device.gpustack.ai/$M.visibility"
if pod $P-sidecar "{$BASE: \"1\"}" "{device.gpustack.ai/$M.visibility: \"1\"}"; then
  owner=$($KC logs $P-sidecar -c c 2>/dev/null)
  ssh=$($KC logs $P-sidecar -c ssh 2>/dev/null)
  echo "$P-sidecar: container ssh saw:"
  echo "$ssh" | cut -c1-200 | sed 's/^/    /'
  if [ -n "$ssh" ] && [ "$ssh" = "$owner" ]; then
    echo "  ok: the sidecar sees exactly its owner's grant"
  else
    fail "the sidecar's view differs from its owner's"
  fi
fi
$KC delete pod $P-sidecar --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1

# --- helm uninstall: nothing of ours left.
echo "=== helm uninstall"
present=$(left)
echo "of ours in the cluster before: $(echo "$present" | tr '\n' ' ')"
for kind in nodefeature.nfd lease.coordination devices.gpustack.ai; do # else the check below would prove nothing
  echo "$present" | grep -q "$kind" || fail "no $kind of ours before the uninstall"
done
"$HELM" uninstall $REL -n $NS --wait --timeout 3m 2>&1 | sed 's/^/  /'
for _ in $(seq 1 30); do [ -z "$(left)" ] && break; sleep 2; done
rest=$(left)
if [ -z "$rest" ]; then
  echo "nothing of ours is left (NodeFeatures, NodeFeatureRule, Lease, Devices, RuntimeClass, Node budget keys, Pods)"
else
  fail "left behind after uninstall:"; echo "$rest" | sed 's/^/  /'
fi

verdict "$NAME $M"
