#!/usr/bin/env bash
# build-release.sh — the release binary as the image ships it: glibc linked in statically
# (`crt-static`), so the node daemon maps no libc.so, libm.so, ld.so or libgcc_s.so (2.4 MiB of
# its resident memory on the rig; BENCHMARKS.md, "On the real kubelet"). The target is named
# explicitly so the flag reaches the binary and not the build scripts and proc macros.
# Built without the package's default `demo` feature (its only default): the node daemon carries
# neither `device-manager demo` nor the kubelet emulator it runs against (code mapped in is
# resident memory); that build answers `demo` with a one-line error.
#
#   scripts/build-release.sh        # prints the binary's path last
#
# Names it resolves (the API server's, in a kubeconfig) are read from /etc/hosts and DNS by the
# glibc built into the binary; the image builds and runs on the same Debian release.
set -eu
REPO=$(cd "$(dirname "$0")/.." && pwd)
host=$(rustc -vV | sed -n 's/^host: //p')
cd "$REPO"
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked -p device-manager --no-default-features --target "$host"
echo "$REPO/target/$host/release/device-manager"
