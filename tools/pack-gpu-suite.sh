#!/bin/sh
# Builds a self-contained folder that runs kclaw's GPU work (the sandbox's
# GPU suite and benchmark, and the service itself for the benchmarks under
# tools/bench and tools/kernelbench) on a machine with only a GPU driver,
# the CUDA toolkit and a C compiler: an install (`cmake --install`: bin/
# and share/kclaw/) of a non-sanitized build, the GPU test programs and
# the exporter's test driver beside it, and every shared library they need
# that is not glibc, the compiler's runtime, the GPU driver or the CUDA
# toolkit, in lib/ (with-env puts it on LD_LIBRARY_PATH).
#
#   tools/pack-gpu-suite.sh [OUT_DIR [BUILD_DIR]]
#
# Then, on the GPU machine: OUT_DIR/run-gpu-suite.sh [LOG_DIR]
# (SKIP_GPU_SUITE=1, SKIP_ADV=1, SKIP_AGREE=1, SKIP_BENCH=1 leave a part
# out), or OUT_DIR/with-env COMMAND (e.g. a benchmark of tools/bench).
set -eu
cd "$(dirname "$0")/.."
command -v patchelf >/dev/null || {
	echo "pack-gpu-suite: needs patchelf (apt-get install patchelf)" >&2
	exit 1
}
out=${1:-.carry/gpu-suite}
build=${2:-build-sandbox-rel}
tests="sbx_gpu_suite sbx_adversarial kc-export-test"

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKC_SANITIZE=OFF \
	-DKC_TESTS=ON >/dev/null
cmake --build "$build" -j 2 >/dev/null

rm -rf "$out"
mkdir -p "$out/lib"
cmake --install "$build" --prefix "$out" >/dev/null
rm -rf "$out/share/doc"
for b in $tests; do
	cp "$build/bin/$b" "$out/bin/"
done

# A library travels unless the target machine is sure to have it.
skip='^(libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux.*|linux-vdso|libgcc_s|libstdc\+\+|libcuda|libnvidia-.*|libnvrtc.*|libcupti|libcublas.*|libcudart|libnvperf.*)\.so'
for b in "$out"/bin/*; do
	ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
	name=$(basename "$lib")
	if echo "$name" | grep -Eq "$skip"; then
		continue
	fi
	cp -L "$lib" "$out/lib/$name"
done
# The binaries find lib/ first through their own DT_RPATH ($ORIGIN/../lib),
# which, unlike LD_LIBRARY_PATH, a Python they start does not inherit: the
# GPU machine's PyTorch keeps its own libraries.
for b in "$out"/bin/*; do
	patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$b"
done
cat >"$out/with-env" <<'ENV'
#!/bin/sh
# OUT_DIR/with-env COMMAND...: runs COMMAND with the CUDA toolkit's
# libraries on LD_LIBRARY_PATH and the pack's bin/ as KCLAW_BIN.
here=$(cd "$(dirname "$0")" && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$cuda/lib64:$cuda/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}"
export KCLAW_BIN="$here/bin" PATH="$here/bin:$PATH"
exec "$@"
ENV
chmod +x "$out/with-env"
# The commit the binaries were built from ("-dirty": with uncommitted
# changes), which the GPU machine's copy of the tree need not be at.
git describe --always --dirty --abbrev=7 >"$out/COMMIT" 2>/dev/null ||
	echo unknown >"$out/COMMIT"
cp -r examples "$out/examples"
cp tests/gpu/timing/timing_agree.py "$out/"
mkdir -p "$out/adversarial"
cp -r tests/gpu/adversarial/cases tests/gpu/adversarial/tasks "$out/adversarial/"
cat >"$out/run-gpu-suite.sh" <<'RUN'
#!/bin/sh
# Runs the GPU suite, the adversarial suite, then the benchmark; logs go to
# $1 (default: ./logs).
here=$(cd "$(dirname "$0")" && pwd)
logs=${1:-$here/logs}
mkdir -p "$logs"
cuda=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$cuda/lib64:$cuda/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}"
export KCLAW_BIN="$here/bin" KCLAW_HOME="${KCLAW_HOME:-$here/.kclaw}"
export KCLAW_GPU_LOG="$logs/gpu-suite.jsonl"
nvidia-smi -L >"$logs/nvidia-smi.txt" 2>&1 || true
echo "pack built from $(cat "$here/COMMIT" 2>/dev/null || echo unknown)" |
	tee "$logs/commit.txt"
rc=0
if [ "${SKIP_GPU_SUITE:-0}" != 1 ]; then
	"$here/bin/sbx_gpu_suite" >"$logs/gpu-suite.log" 2>&1 || rc=1
	cat "$logs/gpu-suite.log"
fi
if [ "${SKIP_ADV:-0}" != 1 ]; then
	KCLAW_ADV_LOG="$logs/adversarial.jsonl" "$here/bin/sbx_adversarial" \
		"$here/adversarial" >"$logs/adversarial.log" 2>&1 || rc=1
	cat "$logs/adversarial.log"
fi
if [ "${SKIP_AGREE:-0}" != 1 ]; then
	KCLAW="$here/bin/kclaw" python3 "$here/timing_agree.py" "$here/examples" \
		>"$logs/timing-agree.log" 2>&1 || rc=1
	cat "$logs/timing-agree.log"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
	"$here/bin/kclaw-sandbox-bench" --runs "${BENCH_RUNS:-5}" \
		>"$logs/bench.log" 2>&1 || rc=1
	cat "$logs/bench.log"
fi
exit $rc
RUN
chmod +x "$out/run-gpu-suite.sh"
du -sh "$out"
