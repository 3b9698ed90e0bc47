#!/bin/sh
# Tuning between rounds on KernelBench problems (a benchmark, not CI; a
# machine with an NVIDIA GPU and PyTorch): `kclaw kernelbench` on five
# problems that tests/gpu/kernelbench has hand-written kernels for, the
# agents asking the provider emulator (tests/agents/llm_server.py, its
# model-like mode replaying those kernels: a scripted model), with the
# sandbox's launch-configuration sweep between rounds ("tune": 1 in
# kclaw.json). Then, per task (tools/bench/tune_share.py), tuning's share
# of the final speedup, the GPU's busy fraction and the best kernel's
# sol_fraction (the roofline, docs/orchestrator.md "Speed of light"), and
# the bandwidths the sandbox measured. Run from the repository root:
#
#   sh tools/bench/kb_tune.sh BIN_DIR KB_DIR [OUT]
#
# Environment: ROUNDS (default 4), CASES (default
# relu,softmax,layernorm,rmsnorm,mse_loss), LATENCY (seconds per model
# reply, default 2), KCLAW_PYTHON (with PyTorch; default python3).
set -u
BIN=$(cd "${1:?BIN_DIR}" && pwd)
KB=$(cd "${2:?KB_DIR}" && pwd)
O=${3:-${OUT:-kb-tune-out}}
rm -rf "$O"
mkdir -p "$O"
O=$(cd "$O" && pwd)
SRC=$(pwd)
K="$BIN/kclaw"
H="$O/home"
EMU=
cleanup() {
	"$K" --home "$H" up --stop >/dev/null 2>&1
	[ -z "$EMU" ] || kill "$EMU" 2>/dev/null
}
trap cleanup EXIT
export KCLAW_PYTHON=${KCLAW_PYTHON:-python3}

python3 "$SRC/tools/kernelbench/kb-emu-replies.py" "$SRC/tests/gpu/kernelbench" \
	"$O/replies" --only "${CASES:-relu,softmax,layernorm,rmsnorm,mse_loss}" \
	>"$O/subset.txt" || exit 1
mkdir -p "$O/kb/level1" "$O/kb/level2" "$O/kb/level3" # the command wants every level
while read -r p; do
	mkdir -p "$O/kb/$(dirname "$p")"
	ln -s "$KB/$p" "$O/kb/$p"
done <"$O/subset.txt"
. "$SRC/tests/agents/emu.sh"
emu_start "$SRC" "$O" --latency "${LATENCY:-2}" || exit 1
URL=$EMU_URL
python3 -c '
import json, sys, urllib.request
body = json.dumps({"actions": [], "model": {"recordings": sys.argv[2], "cycle": True}}).encode()
urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/_script", data=body, method="POST"), timeout=10).read()' \
	"$URL" "$O/replies" || exit 1
export KCLAW_LLM_MODEL=kclaw-emu-1 KCLAW_LLM_BASE_URL="$URL/v1" KCLAW_LLM_API_KEY=sk-bench
mkdir -p "$H"
echo '{"orchestrator": {"tune": 1}}' >"$H/kclaw.json"
t0=$(date +%s)
"$K" --home "$H" kernelbench "$O/kb" --rounds "${ROUNDS:-4}" --out "$O/report" \
	--agents 2 --keep >"$O/run.log" 2>&1
rc=$?
echo "kb_tune: kclaw kernelbench exit $rc after $(($(date +%s) - t0)) s"
"$K" --home "$H" status --json >"$O/tasks.json" 2>/dev/null
for id in $(python3 -c 'import json, sys
for t in json.load(open(sys.argv[1])).get("tasks", []): print(t["id"])' "$O/tasks.json"); do
	"$K" --home "$H" status "$id" --json >"$O/status-$id.json" 2>/dev/null
	"$K" --home "$H" result "$id" --json >"$O/result-$id.json" 2>/dev/null
done
python3 "$SRC/tools/bench/tune_share.py" "$O" | tee "$O/summary.txt"
# The bandwidths the sandbox measured (the roofline's).
grep -rhoE "copy bandwidth [0-9]+ GB/s, read bandwidth [0-9]+ GB/s" "$H" 2>/dev/null | sort -u | tee -a "$O/summary.txt"
exit $rc
