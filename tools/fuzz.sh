#!/bin/sh
# Builds the fuzz targets with clang + libFuzzer + ASan/UBSan and runs each
# for SECONDS (default 60), growing its corpus under tests/fuzz/corpus/.
#   tools/fuzz.sh [SECONDS] [TARGET...]
set -eu
cd "$(dirname "$0")/.."
SECS=${1:-60}
[ $# -gt 0 ] && shift
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug \
	-DKC_SANITIZE=ON -DKC_FUZZ=ON >/dev/null
targets=${*:-$(sed -n 's/^set(KC_FUZZ_TARGETS \(.*\))/\1/p' tests/fuzz/CMakeLists.txt)}
cmake --build build-fuzz -j "$(nproc)" --target $targets
for t in $targets; do
	mkdir -p "tests/fuzz/corpus/$t"
	echo "== $t for ${SECS}s"
	"build-fuzz/bin/$t" -max_total_time="$SECS" -max_len=65536 \
		-timeout=10 "tests/fuzz/corpus/$t" 2>&1 | tail -3
done
