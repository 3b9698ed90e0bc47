#!/bin/sh
# Installs what kclaw needs on a fresh Debian 12 or Ubuntu 24.04 machine and
# says clearly what it could not find. Safe to run again: it installs only
# what is missing.
set -u

PKGS="build-essential cmake pkg-config clang clang-format libnng-dev \
libprotobuf-c-dev protobuf-c-compiler librocksdb-dev libcurl4-openssl-dev \
libcjson-dev python3 procps"

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done

if [ -n "$missing" ]; then
	SUDO=""
	[ "$(id -u)" -ne 0 ] && SUDO="sudo"
	echo "install-deps: installing:$missing"
	if ! { $SUDO apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing; } >/tmp/kclaw-apt.log 2>&1; then
		echo "install-deps: apt-get failed; see /tmp/kclaw-apt.log" >&2
		tail -5 /tmp/kclaw-apt.log >&2
	fi
fi

fail=0
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
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

if [ "$fail" -ne 0 ]; then
	echo "install-deps: some dependencies are missing (above); the build will fail until they are installed" >&2
	exit 1
fi
echo "install-deps: all dependencies present"
