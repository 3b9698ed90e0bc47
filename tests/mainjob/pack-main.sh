#!/bin/sh
# Builds a self-contained folder that runs the main job (`kclaw main`) on a
# machine with only a GPU driver and the CUDA toolkit: tools/pack-gpu-suite.sh
# (the sandbox, kclaw, their libraries, the examples with their recordings),
# plus kclawd, kclaw-agent and their libraries, the agents' prompt templates
# and the expert knowledge.
#
#   tests/mainjob/pack-main.sh [OUT_DIR [BUILD_DIR]]
#
# Then, on the GPU machine: OUT_DIR/run-main.sh [LOG_DIR] [kclaw main options]
set -eu
cd "$(dirname "$0")/../.."
out=${1:-.carry/mainjob}
build=${2:-build-mainjob-rel}

tools/pack-gpu-suite.sh "$out" "$build" >/dev/null
cmake --build "$build" -j 2 --target kclawd kclaw-agent >/dev/null
cp "$build/bin/kclawd" "$build/bin/kclaw-agent" "$out/bin/"

# The same rule as pack-gpu-suite.sh: a library travels unless the target
# machine is sure to have it.
skip='^(libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux.*|linux-vdso|libgcc_s|libstdc\+\+|libcuda|libnvidia-.*|libnvrtc.*|libcupti|libcublas.*|libcudart|libnvperf.*)\.so'
for b in "$out/bin/kclawd" "$out/bin/kclaw-agent"; do
	ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
	name=$(basename "$lib")
	if echo "$name" | grep -Eq "$skip" || [ -e "$out/lib/$name" ]; then
		continue
	fi
	cp -L "$lib" "$out/lib/$name"
done

rm -rf "$out/agents" "$out/store"
mkdir -p "$out/agents" "$out/store"
cp -r agents/prompts "$out/agents/prompts"
cp -r store/knowledge "$out/store/knowledge"
rm -rf "$out/examples"
cp -r examples "$out/examples"
find "$out/examples" -name __pycache__ -prune -exec rm -rf {} +

cat >"$out/run-main.sh" <<'RUN'
#!/bin/sh
# Runs the main job on this machine's GPU(s) with the shipped recordings
# (or the LLM that KCLAW_LLM_MODEL / KCLAW_LLM_BASE_URL configure); the
# output and the report's JSON go to $1 (default: ./logs). Further
# arguments go to `kclaw main`.
here=$(cd "$(dirname "$0")" && pwd)
logs=${1:-$here/logs}
[ $# -gt 0 ] && shift
mkdir -p "$logs"
cuda=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$here/lib:$cuda/lib64:$cuda/extras/CUPTI/lib64:${LD_LIBRARY_PATH:-}"
export KCLAW_PROMPTS_DIR="$here/agents/prompts"
export KCLAW_KNOWLEDGE="$here/store/knowledge"
nvidia-smi -L >"$logs/nvidia-smi.txt" 2>&1 || true
home=$(mktemp -d /tmp/kclaw-main.XXXXXX)
# A kclaw.json for the run (prices, a model), if one is given.
[ -z "${KCLAW_MAIN_CONFIG:-}" ] || cp "$KCLAW_MAIN_CONFIG" "$home/kclaw.json"
{
	"$here/bin/kclaw" --home "$home" main --keep --examples "$here/examples" \
		"$@"
	echo $? >"$logs/main.rc"
} 2>&1 | tee "$logs/main.log"
rc=$(cat "$logs/main.rc")
if [ -S "$home/run/api.ipc" ]; then
	"$here/bin/kclaw" --home "$home" report --json >"$logs/report.json" ||
		rc=1
	"$here/bin/kclaw" --home "$home" up --stop >/dev/null || rc=1
fi
cp "$home"/run/*.log "$logs/" 2>/dev/null || true
echo "main job exit $rc; logs in $logs, home $home"
exit $rc
RUN
chmod +x "$out/run-main.sh"
du -sh "$out"
