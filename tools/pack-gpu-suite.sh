#!/bin/sh
# Builds a self-contained folder that runs the sandbox's GPU suite and
# benchmark on a machine with only a GPU driver, the CUDA toolkit and a C
# compiler: the binaries (non-sanitized build) plus every shared library
# they need that is not glibc, the compiler's runtime, the GPU driver or
# the CUDA toolkit.
#
#   tools/pack-gpu-suite.sh [OUT_DIR [BUILD_DIR]]
#
# Then, on the GPU machine: OUT_DIR/run-gpu-suite.sh [LOG_DIR]
# (SKIP_GPU_SUITE=1, SKIP_ADV=1, SKIP_AGREE=1, SKIP_BENCH=1 leave a part
# out).
set -eu
cd "$(dirname "$0")/.."
out=${1:-.carry/gpu-suite}
build=${2:-build-sandbox-rel}

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKC_SANITIZE=OFF \
	-DKC_TESTS=ON >/dev/null
cmake --build "$build" -j 2 --target kclaw kclaw-sandbox kclaw-sandbox-child \
	kclaw-sandbox-bench sbx_gpu_suite sbx_adversarial >/dev/null

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in kclaw kclaw-sandbox kclaw-sandbox-child kclaw-sandbox-bench \
	sbx_gpu_suite sbx_adversarial; do
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

cp -r examples "$out/examples" 2>/dev/null || true
cp tests/gpu/timing/timing_agree.py "$out/"
# The live PyTorch reference's script, where the child looks for it.
mkdir -p "$out/share/kclaw/torch"
cp gpu-sandbox/torchref.py "$out/share/kclaw/torch/"
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
export LD_LIBRARY_PATH="$here/lib:$cuda/lib64:$cuda/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}"
export KCLAW_BIN="$here/bin" KCLAW_HOME="${KCLAW_HOME:-$here/.kclaw}"
export KCLAW_GPU_LOG="$logs/gpu-suite.jsonl"
nvidia-smi -L >"$logs/nvidia-smi.txt" 2>&1 || true
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
