#!/usr/bin/env bash
# Builds, with no registry, a stand-in for the `python:3.11-slim-bookworm` image the
# Dockerfiles in docker/ start from, so that tests/containers can build and run the server
# image on a machine that reaches package indexes but no image registry:
#
#   scripts/build-python-base-image.sh [IMAGE]   (default localhost/mlyard-python-base:latest)
#   docker build --build-arg PYTHON_IMAGE=localhost/mlyard-python-base -f docker/server.Dockerfile .
#
# A Debian bookworm minbase root file system (debootstrap) with Debian's Python 3.11, pip and
# venv, `python` and `pip` on PATH as in the official image, and this machine's CA
# certificates, so pip inside a build trusts the indexes this machine trusts. An image
# already built from this very script is kept. Needs root, podman and debootstrap.
set -euo pipefail

IMAGE="${1:-localhost/mlyard-python-base:latest}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CERTIFICATES=/etc/ssl/certs/ca-certificates.crt
RECIPE="$( (cat "$0"; cat "$CERTIFICATES") | sha256sum | cut -c1-16)"

source "$(dirname "$0")/rootfs-image.sh"
if image_is_current "$IMAGE" "$RECIPE"; then
    echo "$IMAGE is up to date (recipe $RECIPE)"
    exit 0
fi

WORK="$(mktemp -d /var/tmp/mlyard-python-base.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/rootfs"

echo "debootstrap bookworm (minbase, python3, pip, venv) into $ROOT"
debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates bookworm "$ROOT" \
    "$MIRROR" > "$WORK/debootstrap.log" 2>&1 || { tail -30 "$WORK/debootstrap.log"; exit 1; }
ln -sf /usr/bin/python3 "$ROOT/usr/local/bin/python"
ln -sf /usr/bin/pip3 "$ROOT/usr/local/bin/pip"
# The official image's Python is its own, where pip installs freely; Debian's refuses (PEP 668).
rm -f "$ROOT"/usr/lib/python3*/EXTERNALLY-MANAGED
cp "$CERTIFICATES" "$ROOT$CERTIFICATES"
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc "$ROOT"/usr/share/man

echo "importing $IMAGE"
import_root "$IMAGE" "$ROOT" "$RECIPE" 'CMD ["python3"]' 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' "ENV PIP_CERT=$CERTIFICATES"
podman run --rm "$IMAGE" sh -c 'python --version && pip --version'
