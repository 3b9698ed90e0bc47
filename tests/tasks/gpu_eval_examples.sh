#!/bin/sh
# Evaluates every shipped example through the real sandbox (`kclaw eval`):
# its reference, each correct candidate (must be OK) and each broken one
# (must not be OK), then converts a KernelBench problem with the bridge and
# evaluates a candidate against its stored tensors. For a GPU machine with
# PyTorch (for the bridge part; skipped without it).
#
#   KCLAW=path/to/kclaw tests/tasks/gpu_eval_examples.sh
#
# Prints one line per evaluation: status, median ms, speed-up; exits
# non-zero when a correct candidate is not OK or a broken one is.
# EVAL_LOG=FILE appends every result's JSON to FILE.
cd "$(dirname "$0")/../.." || exit 1
kclaw=${KCLAW:-build/bin/kclaw}
home=$(mktemp -d)
log=${EVAL_LOG:-/dev/null}  # every result's JSON, appended
fail=0

summary() {
	python3 -c '
import json, sys
r = json.load(sys.stdin)
t = r.get("timing") or {}
print("%-14s %8.4f ms  speed-up %6.2f  %s" % ((r.get("status") or "").upper(), t.get("median_ms") or 0,
      r.get("speedup") or 0, (r.get("message") or "")[:150].replace("\n", " ")))'
}

for e in examples/*/; do
	name=$(basename "$e")
	printf '%-18s %-12s ' "$name" reference
	"$kclaw" eval --json --home "$home" "$e" 2>/dev/null | tee -a "$log" | summary
	for c in "$e"candidates/* "$e"broken/*; do
		kind=$(basename "$(dirname "$c")")/$(basename "$c")
		out=$("$kclaw" eval --json --home "$home" "$e" "$c" 2>/dev/null)
		printf "%s\n" "$out" >>"$log"
		printf '%-18s %-12s ' "$name" "$kind"
		printf "%s\n" "$out" | summary
		status=$(printf "%s\n" "$out" | python3 -c 'import json,sys; print((json.load(sys.stdin).get("status") or "").upper())')
		case "$kind" in
		candidates/*) [ "$status" = OK ] || fail=1 ;;
		broken/*) [ "$status" != OK ] || fail=1 ;;
		esac
	done
done

if python3 -c 'import torch' 2>/dev/null; then
	kb=$home/kb_relu
	python3 tools/kernelbench/kb2bundle.py tools/kernelbench/problems/1_relu.py \
		"$kb" --seeds 3 --device cuda || fail=1
	mkdir -p "$home/relu_cand"
	cat >"$home/relu_cand/kernel.cu" <<'CU'
extern "C" __global__ void relu(const float *x, float *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = fmaxf(x[i], 0.0f);
}
CU
	echo '{"steps":[{"kernel":"relu","grid":[64,1,1],"block":[256,1,1],"args":["x","out",{"i32":16384}]}]}' \
		>"$home/relu_cand/plan.json"
	printf '%-18s %-12s ' 1_relu kb-candidate
	out=$("$kclaw" eval --json --home "$home" "$kb" "$home/relu_cand" 2>/dev/null)
	printf "%s\n" "$out" | summary
	status=$(printf "%s\n" "$out" | python3 -c 'import json,sys; print((json.load(sys.stdin).get("status") or "").upper())')
	[ "$status" = OK ] || fail=1
else
	echo "PyTorch is not installed: the KernelBench part is skipped"
fi
rm -rf "$home"
exit $fail
