#!/bin/sh
# Installs what kclaw needs on a fresh Debian 12 or Ubuntu 24.04 machine and
# says clearly what it could not find. Safe to run again: it installs only
# what is missing.
set -u
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

PKGS="build-essential cmake pkg-config clang clang-format libnng-dev \
libprotobuf-c-dev protobuf-c-compiler librocksdb-dev libcurl4-openssl-dev \
libcjson-dev python3 procps iproute2"
# Optional: only the dashboard's browser test needs it (skipped without).
OPT_PKGS="chromium"

is_installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=""
for p in $PKGS; do
	is_installed "$p" || missing="$missing $p"
done
opt_missing=""
for p in $OPT_PKGS; do
	is_installed "$p" || opt_missing="$opt_missing $p"
done

if [ -n "$missing$opt_missing" ]; then
	echo "install-deps: installing:$missing$opt_missing"
	$SUDO apt-get update -qq >/tmp/kclaw-apt.log 2>&1
fi
if [ -n "$missing" ] && ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
	--no-install-recommends $missing >>/tmp/kclaw-apt.log 2>&1; then
	echo "install-deps: apt-get failed; see /tmp/kclaw-apt.log" >&2
	tail -5 /tmp/kclaw-apt.log >&2
fi
for p in $opt_missing; do
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
		--no-install-recommends "$p" >>/tmp/kclaw-apt.log 2>&1
done

fail=0
for p in $PKGS; do
	if ! is_installed "$p"; then
		echo "install-deps: MISSING package $p (apt-get install $p)" >&2
		fail=1
	fi
done

# The CUDA toolkit is not a Debian package we can rely on: it must be
# installed from NVIDIA (https://developer.nvidia.com/cuda-downloads).
CUDA=${CUDAToolkit_ROOT:-/usr/local/cuda}
for f in include/nvrtc.h include/cuda.h include/cublasLt.h lib64/libnvrtc.so lib64/libcublasLt.so; do
	if [ ! -e "$CUDA/$f" ]; then
		echo "install-deps: MISSING CUDA toolkit file $CUDA/$f (install the CUDA toolkit 12 or 13 from NVIDIA, or set CUDAToolkit_ROOT)" >&2
		fail=1
	fi
done
if [ ! -e "$CUDA/include/cupti.h" ] && [ ! -e "$CUDA/extras/CUPTI/include/cupti.h" ]; then
	echo "install-deps: MISSING CUPTI (part of the CUDA toolkit) under $CUDA" >&2
	fail=1
fi

for p in $OPT_PKGS; do
	is_installed "$p" ||
		echo "install-deps: optional package $p is missing; the dashboard browser test will be skipped" >&2
done

# Node.js runs the dashboard's browser test (Playwright driving Debian's
# chromium). Without it that one test is skipped, not failed.
if ! command -v npm >/dev/null 2>&1; then
	$SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/tmp/kclaw-apt-node.log 2>&1 ||
		echo "install-deps: could not install nodejs/npm; the dashboard browser test will be skipped" >&2
fi
if command -v npm >/dev/null 2>&1 && [ ! -d tests/monitor/node_modules/playwright-core ]; then
	(cd tests/monitor && timeout 300 npm ci --no-audit --no-fund >/tmp/kclaw-npm.log 2>&1) ||
		echo "install-deps: npm could not install playwright-core (see /tmp/kclaw-npm.log); the dashboard browser test will be skipped" >&2
fi

# deploy/ tests (tests/deploy): systemd-analyze verifies the units,
# shellcheck the Slurm script, kubectl renders the kustomization, and the
# npm package kubernetes-models validates the manifests against the
# Kubernetes OpenAPI schemas. Each is optional: without it that check is
# skipped (the test says so), not failed.
command -v systemd-analyze >/dev/null 2>&1 ||
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends systemd >>/tmp/kclaw-apt.log 2>&1 ||
	echo "install-deps: could not install systemd (systemd-analyze); deploy_systemd will be skipped" >&2
command -v shellcheck >/dev/null 2>&1 ||
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends shellcheck >>/tmp/kclaw-apt.log 2>&1 ||
	echo "install-deps: could not install shellcheck; deploy_slurm runs without it" >&2
command -v kubectl >/dev/null 2>&1 ||
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends kubernetes-client >>/tmp/kclaw-apt.log 2>&1 ||
	echo "install-deps: could not install kubernetes-client (kubectl); deploy_k8s validates without kustomize rendering" >&2
if command -v npm >/dev/null 2>&1 && [ ! -d tests/deploy/node_modules/kubernetes-models ]; then
	(cd tests/deploy && timeout 300 npm ci --no-audit --no-fund >/tmp/kclaw-npm-deploy.log 2>&1) ||
		echo "install-deps: npm could not install kubernetes-models (see /tmp/kclaw-npm-deploy.log); deploy_k8s will be skipped" >&2
fi

if [ "$fail" -ne 0 ]; then
	echo "install-deps: some dependencies are missing (above); the build will fail until they are installed" >&2
	exit 1
fi
echo "install-deps: all dependencies present"
