#!/usr/bin/env bash
# Builds the container image the container tests run their jobs in, with no registry:
# a Debian bookworm minbase root file system (debootstrap) with python3, and CPU torch
# installed into it by this machine's pip (from its own index or wheel cache, so offline).
#
#   scripts/build-test-image.sh [IMAGE]        (default localhost/mlyard-test-base:latest)
#
# Needs root, podman, debootstrap and a python3.11 with pip (the image's Python is Debian's
# 3.11, so the host's pip picks wheels that fit it). An image already built from this very
# script and the same torch is kept: a second run takes a second.
set -euo pipefail

IMAGE="${1:-localhost/mlyard-test-base:latest}"
TORCH="torch==2.13.0"
# torch warns on import without numpy, into every job's log.
NUMPY="numpy==2.4.6"
PYTHON="${PYTHON:-python3}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What the image is built from: a change to this script or to the torch pin builds it anew.
RECIPE="$( (cat "$0"; echo "$TORCH $NUMPY") | sha256sum | cut -c1-16)"

source "$(dirname "$0")/rootfs-image.sh"
if image_is_current "$IMAGE" "$RECIPE"; then
    echo "$IMAGE is up to date (recipe $RECIPE)"
    exit 0
fi

WORK="$(mktemp -d /var/tmp/mlyard-image.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/rootfs"

echo "debootstrap bookworm (minbase, python3) into $ROOT"
debootstrap --variant=minbase --include=python3 bookworm "$ROOT" "$MIRROR" > "$WORK/debootstrap.log" 2>&1 \
    || { tail -30 "$WORK/debootstrap.log"; exit 1; }

image_python="$(chroot "$ROOT" python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
host_python="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
if [[ "$image_python" != "$host_python" ]]; then
    echo "the image has Python $image_python but $PYTHON is $host_python: wheels would not fit" >&2
    exit 1
fi

SITE="$ROOT/usr/local/lib/python$image_python/dist-packages"
echo "pip install $TORCH into $SITE"
"$PYTHON" -m pip install --quiet --no-compile --no-warn-script-location --target "$SITE" "$TORCH" "$NUMPY"
# Headers, static libraries and the test suite are not needed to run a job; console scripts
# name the host's Python (`python3 -m torch.distributed.run` is torchrun here).
rm -rf "$SITE/torch/include" "$SITE/torch/share" "$SITE/torch/test" "$SITE/bin"
find "$SITE/torch/lib" -name '*.a' -delete
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc "$ROOT"/usr/share/man

echo "importing $IMAGE"
import_root "$IMAGE" "$ROOT" "$RECIPE" 'CMD ["python3"]' 'ENV PATH=/usr/local/bin:/usr/bin:/bin'
podman run --rm --network=host "$IMAGE" python3 -c 'import torch; print("torch", torch.__version__, "in", "'"$IMAGE"'")'
