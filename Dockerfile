# syntax=docker/dockerfile:1
#
# The device-manager image: the binary (node daemon and cluster worker alike), and the slicing
# (preload) libraries that the node daemon's init container stages onto the host
# (/var/lib/gpustack/operator/lib/cuda-<major>/libvgpu.so, seed 000 "Where the preload libraries
# come from").
#
#   docker build -t device-manager:0.1.0 .
#
# The HAMi-core stages clone upstream sources and pull NVIDIA's CUDA images: this build needs the
# network, so CI does not run it (README.md, "Install in a cluster").

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# HAMi-core, pinned to one upstream commit (github.com/Project-HAMi/HAMi-core), built once per
# supported CUDA major. Built on UBI 8 (glibc 2.28), as upstream builds it: the library is loaded
# into the workload's own container, so the older the glibc it links, the more images it serves.
ARG HAMI_CORE_REPO=https://github.com/Project-HAMi/HAMi-core.git
ARG HAMI_CORE_COMMIT=71ffa1af86e6bdb3fbe5e431036545bf90fd81a0
ARG CUDA12_IMAGE=nvidia/cuda:12.9.1-devel-ubi8
ARG CUDA13_IMAGE=nvidia/cuda:13.0.2-devel-ubi8

# --- the binary -----------------------------------------------------------------------------
# glibc linked in statically (scripts/build-release.sh): the daemon maps no shared libraries, which
# is 2.4 MiB less resident memory; built on the runtime image's Debian release, and without the
# `demo` feature (no demo, no kubelet emulator mapped in).
FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    scripts/build-release.sh \
 && install -D -m 0755 "target/$(rustc -vV | sed -n 's/^host: //p')/release/device-manager" /out/device-manager

# --- HAMi-core's preload library, one stage per CUDA major ----------------------------------
FROM ${CUDA12_IMAGE} AS hami-cuda-12
ARG HAMI_CORE_REPO
ARG HAMI_CORE_COMMIT
RUN dnf install -y cmake git make gcc && dnf clean all
COPY deploy/image/build-hami-core /usr/local/bin/
RUN build-hami-core "$HAMI_CORE_REPO" "$HAMI_CORE_COMMIT" /out/libvgpu.so

FROM ${CUDA13_IMAGE} AS hami-cuda-13
ARG HAMI_CORE_REPO
ARG HAMI_CORE_COMMIT
RUN dnf install -y cmake git make gcc && dnf clean all
COPY deploy/image/build-hami-core /usr/local/bin/
RUN build-hami-core "$HAMI_CORE_REPO" "$HAMI_CORE_COMMIT" /out/libvgpu.so

# --- the runtime image ----------------------------------------------------------------------
# debian-slim rather than distroless: the init container's staging script needs sh, cp and cmp,
# and the daemon runs every manufacturer's tool (nvidia-smi, npu-smi, cnmon, …) as the host
# installed it, inside the host root, through the image's /usr/sbin/chroot
# (crates/accel-host/src/commands/host_tools.rs). The image ships no vendor tool and no wrapper:
# the tools come with the host's driver, matched to its kernel module.
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
COPY --from=build /out/device-manager /usr/local/bin/device-manager
COPY deploy/image/stage-libraries /usr/local/bin/
# The file name and layout the responder expects (crates/accel-plugin/src/responder.rs:
# PRELOAD_LIBRARY, library_dir).
COPY --from=hami-cuda-12 /out/libvgpu.so /opt/gpustack/lib/cuda-12/libvgpu.so
COPY --from=hami-cuda-13 /out/libvgpu.so /opt/gpustack/lib/cuda-13/libvgpu.so
# Iluvatar reuses the CUDA 12 HAMi-core build (corex is CUDA-compatible at a 10.2 level, and the
# CUDA 13 path drops the _v2/_v3 anchors it needs), in one flat directory beside the
# ld.so.preload that names it (crates/accel-iluvatar/src/responder.rs).
COPY --from=hami-cuda-12 /out/libvgpu.so /opt/gpustack/lib/iluvatar/libvgpu.so
COPY deploy/image/lib/iluvatar/ld.so.preload /opt/gpustack/lib/iluvatar/ld.so.preload
# Non-root by default: the worker runs as this user. The node daemon's DaemonSet runs it as root
# (privileged), because its work needs it: /dev/kmsg, the GPUs' device nodes, chroot into the
# host root, the kubelet's sockets and its own root-only admin socket.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/device-manager"]
