#!/bin/sh
# Makes a relocatable tarball of a build: `cmake --install` into a staging
# folder (bin/, share/kclaw/), plus the shared libraries the binaries need
# that a target machine may lack (found with ldd, kept in lib/, which the
# binaries' RPATH $ORIGIN/../lib finds). Unpacked anywhere, it runs without
# the source tree or the build machine's libraries.
#
#   tools/package.sh [BUILD_DIR [OUT_DIR]]     (defaults: build, .)
#
# Left out, as every target has them or must bring its own: the C runtime
# (libc, libm, libstdc++, libgcc_s, the loader), the GPU driver (libcuda,
# loaded at run time) and the CUDA toolkit's libraries (NVRTC, CUPTI,
# cuBLASLt; KCLAW_PACK_CUDA=1 carries them too). Prints the tarball's path.
set -eu
build=${1:-build}
out=${2:-.}
[ -f "$build/CMakeCache.txt" ] || {
	echo "package.sh: $build is not a CMake build folder (build first, or pass BUILD_DIR)" >&2
	exit 2
}
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
name="kclaw-${version:-0}-linux-$(uname -m)"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/$name"

cmake --install "$build" --prefix "$root" >/dev/null
mkdir -p "$root/lib"
skip='^(libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux.*|linux-vdso|libgcc_s|libstdc\+\+|libcuda|libnvidia-.*)\.so'
cuda='^(libnvrtc.*|libcupti|libcublas.*|libcudart|libnvperf.*|libnvJitLink)\.so'
for b in "$root"/bin/*; do
	ldd "$b" | awk '/=> not found/ {print "MISSING " $1} /=> \// {print $3}'
done | sort -u | while read -r lib rest; do
	if [ "$lib" = MISSING ]; then
		echo "package.sh: a binary needs $rest, which ldd cannot find here" >&2
		exit 1
	fi
	n=$(basename "$lib")
	echo "$n" | grep -Eq "$skip" && continue
	if echo "$n" | grep -Eq "$cuda" && [ "${KCLAW_PACK_CUDA:-0}" != 1 ]; then
		continue
	fi
	[ -e "$root/lib/$n" ] || cp -L "$lib" "$root/lib/$n"
done
find "$root/share" -name __pycache__ -prune -exec rm -rf {} +

mkdir -p "$out"
tar -C "$stage" -czf "$out/$name.tar.gz" "$name"
echo "$(cd "$out" && pwd)/$name.tar.gz"
