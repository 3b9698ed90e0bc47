#!/bin/sh
# The two commands of the README:
#   tools/dev.sh test   installs what is missing, builds with sanitizers and
#                       runs the whole test suite (this is what CI runs)
#   tools/dev.sh main   installs, builds and runs the main job
set -eu
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)

case "${1:-}" in
test)
	tools/install-deps.sh
	cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DKC_SANITIZE=ON >/dev/null
	cmake --build build-test -j "$JOBS"
	cd build-test
	ctest --output-on-failure -j "$JOBS" --label-exclude gpu
	;;
main)
	tools/install-deps.sh
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKC_TESTS=OFF >/dev/null
	cmake --build build -j "$JOBS"
	exec build/bin/kclaw main --no-gpu-ok
	;;
*)
	echo "usage: tools/dev.sh test|main" >&2
	exit 2
	;;
esac
