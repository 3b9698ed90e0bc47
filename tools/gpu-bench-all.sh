#!/bin/sh
# Runs the GPU figures of docs/benchmarks.md on a machine with an NVIDIA
# GPU, PyTorch and the CUDA toolkit but none of kclaw's build dependencies,
# from the repository's root, in groups that each fit in ten minutes:
#
#   tools/gpu-bench-all.sh suite|cases|torch|jobs|search [PACK [KB_DIR]]
#
#   suite   the GPU suite, the adversarial suite, timing_agree.py and
#           kclaw-sandbox-bench (run-gpu-suite.sh), then the KernelBench
#           cases of tests/gpu/kernelbench (run.py)
#   cases   only those KernelBench cases
#   torch   bench_torch_eval.py (what a torch evaluation costs), then
#           torch_ops_bench.py (the export as PyTorch operators)
#   jobs    tools/kernelbench/kb-h200-bench.sh (`kclaw kernelbench`:
#           conversion of all problems, the job killed and resumed)
#   search  tools/bench/parallel_candidates.sh, K = 1 against K = 4, then
#           again with tuning between rounds on the main job's six
#           examples (TUNE_TASKS), with tuning's share of the final speedup
#           and the GPU's busy fraction; then tools/bench/kb_tune.sh, the
#           same figures with tuning on five KernelBench problems
#
# PACK is tools/pack-gpu-suite.sh's folder (default .carry/gpu-suite, built
# on any machine), KB_DIR a KernelBench tree (default .carry/kernelbench).
# Logs go to $OUT/<group> (default ./gpu-bench-out), each part under its
# own `timeout` (seconds in the environment: T_SUITE, T_CASES, ...), and
# the group's summary lines to $OUT/<group>/summary.txt. OPS_ONLY=CASE,...
# limits torch_ops_bench.py's cases; T_EVAL=0, T_OPS=0, T_PAR=0, T_TUNE=0 or
# T_KBTUNE=0 leaves a part out.
set -u
cd "$(dirname "$0")/.."
group=${1:?usage: tools/gpu-bench-all.sh suite|cases|torch|jobs|search [PACK [KB_DIR]]}
P=$(cd "${2:-.carry/gpu-suite}" && pwd)
KB=$(cd "${3:-.carry/kernelbench}" && pwd)
O=${OUT:-gpu-bench-out}/$group
mkdir -p "$O"
O=$(cd "$O" && pwd)
export KCLAW_PYTHON=${KCLAW_PYTHON:-python3}
W="$P/with-env"
S="$O/summary.txt"
{
	echo "commit $(cat "$P/COMMIT" 2>/dev/null || echo ?) (the pack's; the tree here: $(git rev-parse --short HEAD 2>/dev/null || echo ?)) date $(date -u +%Y-%m-%dT%H:%MZ)"
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
	"$KCLAW_PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} >"$S"

part() { # part NAME SECONDS COMMAND...: runs it, logs, says how it ended
	name=$1 secs=$2
	shift 2
	t0=$(date +%s)
	timeout -k 5 "$secs" "$@" >"$O/$name.log" 2>&1
	rc=$?
	echo "$name: exit $rc after $(($(date +%s) - t0)) s (limit $secs s)" >>"$S"
}

case "$group" in
suite | cases)
	[ "$group" = cases ] ||
		part gpu-suite "${T_SUITE:-240}" "$P/run-gpu-suite.sh" "$O/suite"
	part kb-cases "${T_CASES:-300}" "$W" python3 tests/gpu/kernelbench/run.py \
		"$P/bin" "$KB" --out "$O/kb-cases.jsonl" --budget-s "${B_CASES:-270}"
	;;
torch)
	[ "${T_EVAL:-330}" = 0 ] || part torch-eval "${T_EVAL:-330}" "$W" python3 \
		tests/gpu/kernelbench/bench_torch_eval.py --bin "$P/bin" --kb "$KB" \
		--out "$O/torch-eval" --budget-s "${B_EVAL:-300}"
	[ "${T_OPS:-200}" = 0 ] || part torch-ops "${T_OPS:-200}" "$W" python3 tools/bench/torch_ops_bench.py \
		--export "$P/bin/kc-export-test" --kb "$KB" --out "$O/torch-ops" \
		${OPS_ONLY:+--only "$OPS_ONLY"}
	;;
jobs)
	part kernelbench "${T_KB:-500}" "$W" sh tools/kernelbench/kb-h200-bench.sh \
		"$P/bin" "$KB" "$O/kb"
	;;
search)
	[ "${T_PAR:-270}" = 0 ] || part parallel "${T_PAR:-270}" env KCLAW_BIN="$P/bin" OUT="$O/parallel" \
		LATENCY="${LATENCY:-5}" ROUNDS="${ROUNDS:-8}" K="${K:-4}" \
		TOKENS="${TOKENS:-150000}" "$W" sh tools/bench/parallel_candidates.sh
	[ "${T_TUNE:-270}" = 0 ] ||
		part parallel-tune "${T_TUNE:-270}" env KCLAW_BIN="$P/bin" \
		OUT="$O/parallel-tune" TUNE=1 LATENCY="${LATENCY:-5}" \
		TASKS="${TUNE_TASKS:-bias_gelu softmax_rows layernorm sum_reduce matmul_bias_relu conv2d_5x5}" \
		ROUNDS="${ROUNDS:-8}" K="${K:-4}" TOKENS="${TOKENS:-150000}" \
		"$W" sh tools/bench/parallel_candidates.sh
	[ "${T_KBTUNE:-300}" = 0 ] || part kb-tune "${T_KBTUNE:-300}" "$W" sh \
		tools/bench/kb_tune.sh "$P/bin" "$KB" "$O/kb-tune"
	;;
*)
	echo "usage: tools/gpu-bench-all.sh suite|cases|torch|jobs|search [PACK [KB_DIR]]" >&2
	exit 2
	;;
esac
for f in "$O"/*.log; do
	echo "---- $(basename "$f"): last lines"
	tail -n 25 "$f"
done >>"$S"
cat "$S"
