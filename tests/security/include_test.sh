#!/bin/sh
# A candidate cannot read the host's files through the compiler: each
# #include that is not a literal toolkit <header> ends in COMPILE_ERROR
# before NVRTC runs, and the file's content never reaches the output.
set -u
kclaw="$KCLAW_BIN/kclaw"
ex="$KCLAW_SRC/examples/bias_gelu"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KCLAW_HOME="$tmp/home" KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1
fail() { echo "FAIL: $*" >&2; exit 1; }

echo '#error SECRET_MARKER_7f3a' >"$tmp/secret.h"
mkdir -p "$tmp/cand"
cp "$ex/candidates/1/plan.json" "$tmp/cand/plan.json"
n=0
for inc in "\"$tmp/secret.h\"" '"secret.h"' "<$tmp/secret.h>" \
	"<../../../../../../../..$tmp/secret.h>" 'F'; do
	n=$((n + 1))
	{
		echo "#define F \"$tmp/secret.h\""
		echo "#include $inc"
		cat "$ex/candidates/1/kernel.cu"
	} >"$tmp/cand/kernel.cu"
	# Run from the secret's folder: a quoted name is searched there.
	out=$(cd "$tmp" && "$kclaw" eval --compile-only --arch sm_90 "$ex" \
		"$tmp/cand" 2>&1) && fail "#include $inc exited 0: $out"
	echo "$out" | grep -q "^status: COMPILE_ERROR" || fail "$inc: $out"
	echo "$out" | grep -q "is not allowed" || fail "$inc: no reason: $out"
	echo "$out" | grep -q SECRET_MARKER && fail "$inc leaked: $out"
done
echo "refused $n spellings"

# The same candidate with a toolkit header compiles.
{
	echo "#include <cuda_fp16.h>"
	cat "$ex/candidates/1/kernel.cu"
} >"$tmp/cand/kernel.cu"
out=$("$kclaw" eval --compile-only --arch sm_90 "$ex" "$tmp/cand") ||
	fail "a toolkit header is refused: $out"
echo ok
