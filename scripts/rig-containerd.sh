#!/usr/bin/env bash
# Builds a CDI-capable containerd (v2.x; CDI on by default) from its public source for the rig,
# whose Debian containerd 1.6 cannot inject CDI devices (issue 46 item 6). The source is the
# bare mirror `fetch github:containerd/containerd` brings (MIRROR, as the rig's build.sh looks
# them up); Go is the rig's own (/tmp/k8s/venv126). Installs containerd and its runc shim into
# /tmp/k8s/containerd2/bin; `scripts/rig-dra.sh` puts that folder first on the node's PATH.
#
#   scripts/rig-containerd.sh            # ~10-20 min on 2 cores, once
#   TAG=v2.3.4 NICE=10 JOBS=2 scripts/rig-containerd.sh
set -euo pipefail
trap 'exit 143' INT TERM HUP

RIG=${RIG:-/tmp/k8s}
TAG=${TAG:-v2.3.4}
JOBS=${JOBS:-2}
NICE=${NICE:-10}
HERE=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=${MIRROR:-}
if [ -z "$MIRROR" ]; then
  d=$HERE
  while [ "$d" != / ]; do
    [ -d "$d/.mirror" ] && { MIRROR=$d/.mirror; break; }
    d=$(dirname "$d")
  done
fi
GIT=${CONTAINERD_GIT:-$MIRROR/containerd+containerd/repo}
OUT=$RIG/containerd2
GO=$RIG/venv126/bin/go

die() { echo "rig-containerd: $*" >&2; exit 1; }
[ -d "$GIT" ] || die "no containerd mirror at $GIT (fetch github:containerd/containerd)"
[ -x "$GO" ] || die "no Go at $GO (../shared/rig/build.sh go)"
git --git-dir="$GIT" rev-parse -q --verify "$TAG^{commit}" >/dev/null || die "tag $TAG not in $GIT"

if [ -x "$OUT/bin/containerd" ] && "$OUT/bin/containerd" --version | grep -q " $TAG "; then
  echo "rig-containerd: $("$OUT/bin/containerd" --version) already in $OUT/bin"
  exit 0
fi

SRC=$OUT/src-$TAG
if [ ! -f "$SRC/go.mod" ]; then
  rm -rf "$SRC"
  mkdir -p "$SRC"
  git --git-dir="$GIT" archive "$TAG" | tar -x -C "$SRC"
fi
commit=$(git --git-dir="$GIT" rev-parse "$TAG^{commit}")
export GOROOT; GOROOT=$("$GO" env GOROOT)
export PATH=$GOROOT/bin:$PATH GOPATH=$RIG/gopath GOCACHE=$RIG/gocache GOFLAGS=-mod=vendor GOTOOLCHAIN=local
mkdir -p "$OUT/bin"
cd "$SRC"
ld="-s -w -X github.com/containerd/containerd/v2/version.Version=$TAG -X github.com/containerd/containerd/v2/version.Revision=$commit"
for c in containerd containerd-shim-runc-v2; do
  echo "rig-containerd: go build $c ($TAG)"
  CGO_ENABLED=0 nice -n "$NICE" go build -p "$JOBS" -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "$ld" -o "$OUT/bin/$c" "./cmd/$c"
done
echo "containerd: github.com/containerd/containerd@$TAG ($commit)" > "$OUT/SOURCES.txt"
"$OUT/bin/containerd" --version
echo "rig-containerd: OK"
