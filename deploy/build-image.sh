#!/usr/bin/env bash
# Builds the hangar image (default tag hangar:dev) with no base image from a
# registry: hangar is built here as a static binary (glibc static, rustls with
# ring, no OpenSSL) and copied with a static busybox into an image FROM
# scratch (see the Dockerfile at the repo root).
#
#   deploy/build-image.sh [TAG]
#
# Environment: CARGO_TARGET_DIR (where cargo builds), BUSYBOX (a static
# busybox; default /bin/busybox from Debian's busybox-static).
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-${HANGAR_IMAGE:-hangar:dev}}
target=x86_64-unknown-linux-gnu
target_dir=${CARGO_TARGET_DIR:-target}
busybox=${BUSYBOX:-/bin/busybox}

is_static() { ! readelf -lW "$1" | grep -q 'Requesting program interpreter' && ! readelf -d "$1" | grep -q '(NEEDED)'; }

if [ ! -x "$busybox" ] || ! is_static "$busybox"; then
  echo "build-image: $busybox is missing or not static: apt-get install busybox-static" >&2
  exit 1
fi
# rustls/ring only: nothing in the tree may pull OpenSSL or native-tls in.
if cargo tree --locked -p hangar --target "$target" -e normal --prefix none 2>/dev/null | grep -Eq '^(openssl-sys|native-tls|aws-lc-sys) '; then
  echo "build-image: OpenSSL/native-tls/aws-lc is in hangar's dependency tree; the static build needs rustls with ring" >&2
  exit 1
fi

echo "build-image: building a static hangar for $target"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --locked --release --no-default-features --target "$target" -p hangar
bin="$target_dir/$target/release/hangar"
if ! is_static "$bin"; then
  echo "build-image: $bin is dynamically linked:" >&2
  readelf -d "$bin" | grep NEEDED >&2 || true
  exit 1
fi

ctx=$(mktemp -d /tmp/hangar-image.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
cp Dockerfile "$ctx/Dockerfile"
cp "$bin" "$ctx/hangar"
strip "$ctx/hangar" 2>/dev/null || true
cp "$busybox" "$ctx/busybox"
old=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
docker build -q -t "$tag" "$ctx" >/dev/null
# Drop the image this tag named before, so rebuilds leave no dangling images.
if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$tag")" ]; then
  docker rmi "$old" >/dev/null 2>&1 || true
fi
echo "build-image: built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.1f MB", $1/1e6}'))"
