#!/bin/sh
# A candidate cannot ask the compiler whether a file exists on the sandbox
# host: `__has_include` (also _next, __has_embed, and spelled by token
# pasting or behind a macro) with anything but a literal toolkit <name>
# ends in COMPILE_ERROR before NVRTC runs, with the reason, and whether
# the file exists never shows. A toolkit probe still compiles.
set -u
kclaw="$KCLAW_BIN/kclaw"
ex="$KCLAW_SRC/examples/bias_gelu"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KCLAW_HOME="$tmp/home" KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1
fail() { echo "FAIL: $*" >&2; exit 1; }

echo secret >"$tmp/secret.h"
mkdir -p "$tmp/cand"
cp "$ex/candidates/1/plan.json" "$tmp/cand/plan.json"
# Each probe makes the compile fail with EXISTS_7f3a when the file exists,
# as it did before the check: the marker must never appear.
n=0
for probe in "__has_include(\"$tmp/secret.h\")" \
	"__has_include(<$tmp/secret.h>)" \
	"__has_include(<../../../../../../../..$tmp/secret.h>)" \
	"__has_include_next(\"$tmp/secret.h\")" \
	"__has_include /* c */ ( F )" \
	"H(\"$tmp/secret.h\")" \
	"P(__has_,include)(\"$tmp/secret.h\")"; do
	n=$((n + 1))
	{
		echo "#define F \"$tmp/secret.h\""
		echo "#define H __has_include"
		if [ $n -eq 7 ]; then echo "#define P(a, b) a##b"; fi
		echo "#if $probe"
		echo "#error EXISTS_7f3a"
		echo "#endif"
		cat "$ex/candidates/1/kernel.cu"
	} >"$tmp/cand/kernel.cu"
	out=$(cd "$tmp" && "$kclaw" eval --compile-only --arch sm_90 "$ex" \
		"$tmp/cand" 2>&1) && fail "$probe exited 0: $out"
	echo "$out" | grep -q "^status: COMPILE_ERROR" || fail "$probe: $out"
	echo "$out" | grep -q "is not allowed" || fail "$probe: no reason: $out"
	echo "$out" | grep -q EXISTS_7f3a && fail "$probe leaked: $out"
done
echo "refused $n probes"

# Asking for a toolkit header, or whether the feature exists, compiles.
{
	echo "#if defined(__has_include)"
	echo "#if __has_include(<cuda_fp16.h>)"
	echo "#include <cuda_fp16.h>"
	echo "#endif"
	echo "#endif"
	cat "$ex/candidates/1/kernel.cu"
} >"$tmp/cand/kernel.cu"
out=$("$kclaw" eval --compile-only --arch sm_90 "$ex" "$tmp/cand") ||
	fail "a toolkit probe is refused: $out"
echo ok
