#!/usr/bin/env bash
# tools/install-deps.sh: install every Debian package this tutorial needs.
# Idempotent: it installs only what is missing. Runs as root, or through sudo.
set -euo pipefail

PACKAGES=(
    # build
    cmake ninja-build g++ pkg-config libgtest-dev libbenchmark-dev
    clang clang-format clang-tidy libclang-rt-dev
    # RDMA user space
    libibverbs-dev ibverbs-providers ibverbs-utils rdma-core perftest iproute2
    # the Soft-RoCE lab
    qemu-system-x86 busybox-static kmod cpio
    # the docs
    doxygen graphviz doxygen-awesome-css
)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done

# The lab resolves the kernel package with apt-cache: it needs package lists.
need_lists=0
apt-cache show linux-image-amd64 >/dev/null 2>&1 || need_lists=1

if ((${#missing[@]} == 0 && need_lists == 0)); then
    echo "install-deps: all ${#PACKAGES[@]} packages are installed"
    exit 0
fi

if ((EUID == 0)); then
    SUDO=()
elif command -v sudo >/dev/null; then
    SUDO=(sudo)
else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
fi

echo "install-deps: installing ${missing[*]:-nothing (refreshing package lists)}"
"${SUDO[@]}" apt-get update -q
if ((${#missing[@]})); then
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
