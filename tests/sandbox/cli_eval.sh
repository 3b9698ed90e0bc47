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
echo "$json" | grep -q '"status": *"ok"' || fail "json: $json"
echo "$json" | grep -q '"compile_cached": *true' && fail "reference cached?"

mkdir -p "$tmp/bad"
printf 'extern "C" __global__ void bias_gelu(float *y) { y[0] = nope; }\n' \
	>"$tmp/bad/kernel.cu"
cp "$ex/candidates/1/plan.json" "$tmp/bad/plan.json"
out=$("$kclaw" eval --compile-only --arch sm_90 "$ex" "$tmp/bad") &&
	fail "a broken candidate exited 0"
echo "$out" | grep -q "^status: COMPILE_ERROR" || fail "$out"
echo "$out" | grep -q "nope" || fail "no compiler log: $out"

# A candidate with tunables: every configuration compiles and plan-checks,
# and the result lists them (examples/bias_gelu/tuned: 4 block sizes x 3).
json=$("$kclaw" eval --json --compile-only --arch sm_90 "$ex" "$ex/tuned") ||
	fail "the tuned candidate does not compile: $json"
n=$(echo "$json" | grep -o '"config": *"BLOCK=[0-9]* PER=[0-9]*"' | wc -l)
[ "$n" -eq 12 ] || fail "want 12 configurations, got $n: $json"
echo "$json" | grep -q '"tuned_config": *"BLOCK=256 PER=1"' ||
	fail "compile-only picks the default: $json"
# The sweep compiled its 12 configurations in parallel first, so each
# configuration's own evaluation found its compile in the cache.
echo "$json" | grep -q '"name":"sandbox.precompiled","value":12,' ||
	fail "no parallel precompile of 12: $json"
n=$(echo "$json" | grep -o '"compile_cached":true}' | wc -l)
[ "$n" -eq 12 ] || fail "want 12 cached compiles, got $n: $json"
# Switched off (and with a fresh cache), each compiles in turn, uncached.
json=$(KCLAW_SANDBOX_PARALLEL_COMPILE=0 "$kclaw" eval --json --compile-only \
	--arch sm_90 --home "$tmp/home-serial" "$ex" "$ex/tuned") ||
	fail "the serial sweep does not compile: $json"
echo "$json" | grep -q 'sandbox.precompiled' && fail "precompiled: $json"
echo "$json" | grep -q '"compile_cached":true}' && fail "cached: $json"
# One configuration that does not compile is still that configuration's
# COMPILE_ERROR with its own log, whatever the precompile did with it.
mkdir -p "$tmp/tunebreak"
cp "$ex/tuned/plan.json" "$tmp/tunebreak/"
{
	echo '#if BLOCK == 512 && PER == 2'
	echo 'static_assert(BLOCK != 512, "config_512x2_is_broken");'
	echo '#endif'
	cat "$ex/tuned/kernel.cu"
} >"$tmp/tunebreak/kernel.cu"
json=$("$kclaw" eval --json --compile-only --arch sm_90 "$ex" \
	"$tmp/tunebreak") && fail "a broken configuration exited 0: $json"
echo "$json" | grep -q '^{"job_id":"[0-9a-f]*","status":"compile_error"' ||
	fail "not COMPILE_ERROR: $json"
echo "$json" | grep -q '"compile_log":"kernel.cu([0-9]*): error: static assertion failed with \\"config_512x2_is_broken' ||
	fail "no log of the broken configuration: $json"
echo "$json" | grep -q '"tuned_config":"BLOCK=512 PER=2"' ||
	fail "the result is not the broken configuration's: $json"
echo "$json" | grep -q '"name":"sandbox.precompiled","value":11,' ||
	fail "want 11 precompiled: $json"
n=$(echo "$json" | grep -o '"status":"ok","median_ms":null,"message":"[^"]*","compile_cached":true}' | wc -l)
[ "$n" -eq 11 ] || fail "want 11 cached configurations, got $n: $json"
# A tunable expression that does not evaluate is the plan's error.
mkdir -p "$tmp/badtune"
cp "$ex/tuned/kernel.cu" "$tmp/badtune/"
sed 's/(\$BLOCK \* \$PER)/($BLOCK * $PERX)/' "$ex/tuned/plan.json" \
	>"$tmp/badtune/plan.json"
out=$("$kclaw" eval --compile-only --arch sm_90 "$ex" "$tmp/badtune") &&
	fail "a bad tunable exited 0"
echo "$out" | grep -q "^status: PLAN_ERROR" || fail "$out"
echo "$out" | grep -q "unknown tunable" || fail "$out"

out=$("$kclaw" eval "$ex" "$ex/candidates/1" 2>/dev/null) &&
	fail "no GPU yet exit 0"
echo "$out" | grep -q "^status: NO_DEVICE" || fail "$out"
echo ok
