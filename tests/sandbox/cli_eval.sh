#!/bin/sh
# `kclaw eval` without a GPU: compile-only works for sm_90 and reports
# kernels; a broken candidate fails with the compiler's message; a normal
# evaluation answers NO_DEVICE with exit status 1.
set -u
kclaw="$KCLAW_BIN/kclaw"
ex="$KCLAW_SRC/examples/bias_gelu"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KCLAW_HOME="$tmp/home" KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$kclaw" eval --compile-only --arch sm_90 "$ex" "$ex/candidates/1") ||
	fail "compile-only exited $?: $out"
echo "$out" | grep -q "^status: OK" || fail "no OK: $out"
echo "$out" | grep -q "^kernel .*registers" || fail "no kernel report: $out"

json=$("$kclaw" eval --json --compile-only --arch sm_90 "$ex") ||
	fail "the reference does not compile: $json"
echo "$json" | grep -q '"status": *"OK"' || fail "json: $json"
echo "$json" | grep -q '"compile_cached": *true' && fail "reference cached?"

mkdir -p "$tmp/bad"
printf 'extern "C" __global__ void bias_gelu(float *y) { y[0] = nope; }\n' \
	>"$tmp/bad/kernel.cu"
cp "$ex/candidates/1/plan.json" "$tmp/bad/plan.json"
out=$("$kclaw" eval --compile-only --arch sm_90 "$ex" "$tmp/bad") &&
	fail "a broken candidate exited 0"
echo "$out" | grep -q "^status: COMPILE_ERROR" || fail "$out"
echo "$out" | grep -q "nope" || fail "no compiler log: $out"

out=$("$kclaw" eval "$ex" "$ex/candidates/1" 2>/dev/null) &&
	fail "no GPU yet exit 0"
echo "$out" | grep -q "^status: NO_DEVICE" || fail "$out"
echo ok
