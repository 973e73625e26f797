#!/usr/bin/env bash
# tools/install-deps.sh [--site-check]: install every Debian package this tutorial needs.
# Idempotent: it installs only what is missing. Runs as root, or through sudo.
#   --site-check  also the docs' browser test's npm module (playwright-core, from the npm
#                 registry, into tools/site-check/node_modules); tools/run-tests asks for it.
set -euo pipefail

site_check=0
case ${1:-} in
    "") ;;
    --site-check) site_check=1 ;;
    *) echo "usage: tools/install-deps.sh [--site-check]" >&2; exit 2 ;;
esac

PACKAGES=(
    # build
    cmake ninja-build g++ pkg-config libgtest-dev libbenchmark-dev
    # a compiler cache: tools/run-tests builds the same sources twice (default and ci presets)
    ccache
    # the exercises' answers that change code (stepNN_*/exercises/*.patch)
    patch
    clang clang-format clang-tidy libclang-rt-dev
    # RDMA user space
    libibverbs-dev ibverbs-providers ibverbs-utils rdma-core perftest iproute2
    # the connection manager (step08_rdma_cm) and rdma-core's examples it interoperates with
    librdmacm-dev rdmacm-utils
    # the Soft-RoCE lab
    qemu-system-x86 busybox-static kmod cpio
    # the two-host lab's side-by-side shells (lab/softroce shell --hosts 2)
    tmux
    # the two-host lab's packet captures (tcpdump on host a) and their decoding (tools/decode-wire)
    tcpdump tshark
    # the docs
    doxygen graphviz doxygen-awesome-css
    # the performance page's latency plot (bench/plot-latency: gnuplot's pngcairo terminal, DejaVu)
    gnuplot-nox fonts-dejavu-core
    # the docs' browser test (tools/site-check)
    chromium
    # every shell script passes shellcheck (tests/shellcheck.sh)
    shellcheck
)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done

# The lab resolves the kernel package with apt-cache: it needs package lists.
need_lists=0
apt-cache show linux-image-amd64 >/dev/null 2>&1 || need_lists=1

# Node.js for the browser test: the machine's own, or Debian's.
command -v npm >/dev/null || missing+=(nodejs npm)

install_node_modules() {
    local dir
    ((site_check)) || return 0
    dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)/site-check
    if [[ ! -d $dir/node_modules/playwright-core ]]; then
        echo "install-deps: npm ci in tools/site-check (playwright-core)"
        npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
    fi
}

if ((${#missing[@]} == 0 && need_lists == 0)); then
    echo "install-deps: all ${#PACKAGES[@]} packages are installed"
    install_node_modules
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
install_node_modules
