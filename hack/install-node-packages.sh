#!/usr/bin/env bash
# Install, from Debian's packages, what the real node and the image builds need: the container runtime
# (containerd, runc), the pod network (CNI plugins, iptables, conntrack, iproute2), the daemonless image builder
# (buildah) and what the test images are made of (mmdebstrap for the base, busybox-static for the NATS stand-in,
# libc6-dev to link the pause binary statically), and what the documented webhook senders run with (curl, openssl:
# the integration tier runs examples/senders/ as written). Installs only what is missing; needs root, as the node does.
set -euo pipefail

PACKAGES="containerd runc containernetworking-plugins iptables conntrack iproute2 buildah mmdebstrap
busybox-static libc6-dev gcc curl openssl"

missing=()
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "node packages installed"
  exit 0
fi
[[ $(id -u) == 0 ]] || { echo "error: installing ${missing[*]} needs root" >&2; exit 1; }
echo "installing ${missing[*]}"
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
