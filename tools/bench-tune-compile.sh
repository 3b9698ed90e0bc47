#!/bin/sh
# Wall time of a compile-only tunable sweep with a cold compile cache, with
# the configurations compiled one after another and compiled in parallel
# first (docs/plan.md "Tunables"). Needs no GPU.
#   tools/bench-tune-compile.sh [BUILD_DIR] [RUNS]     (default build-h, 5)
# Runs `kclaw eval --compile-only --arch sm_90 examples/bias_gelu
# examples/bias_gelu/tuned --json` (12 configurations) with a fresh --home
# each time, alternating KCLAW_SANDBOX_PARALLEL_COMPILE=0 (serial, as before
# the parallel precompile) and =1, and prints the median of each.
set -eu
cd "$(dirname "$0")/.."
B=${1:-build-h}
runs=${2:-5}
ex=examples/bias_gelu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1
: >"$tmp/0" && : >"$tmp/1"
i=0
while [ "$i" -lt "$runs" ]; do
	for m in 0 1; do
		rm -rf "$tmp/home"
		t0=$(date +%s%N)
		KCLAW_SANDBOX_PARALLEL_COMPILE=$m "$B/bin/kclaw" eval --json \
			--compile-only --arch sm_90 --home "$tmp/home" "$ex" \
			"$ex/tuned" >"$tmp/out.json" 2>/dev/null
		t1=$(date +%s%N)
		echo $(((t1 - t0) / 1000000)) >>"$tmp/$m"
		[ "$m" = 1 ] && cp "$tmp/out.json" "$tmp/par.json"
	done
	i=$((i + 1))
done
med() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
s=$(med "$tmp/0")
p=$(med "$tmp/1")
info=$(grep -o '"name":"sandbox.precompile[a-z_]*","value":[0-9.]*' \
	"$tmp/par.json" | sed 's/"name":"sandbox\.//; s/","value":/=/' | tr '\n' ' ')
echo "cpus $(nproc), $runs runs each, 12 configurations, cold cache"
echo "serial   (KCLAW_SANDBOX_PARALLEL_COMPILE=0): median wall $s ms  [$(tr '\n' ' ' <"$tmp/0")]"
echo "parallel (default):                          median wall $p ms  [$(tr '\n' ' ' <"$tmp/1")]"
echo "parallel sweep: $info"
awk -v s="$s" -v p="$p" 'BEGIN { printf "speed-up %.2fx\n", s / p }'
