#!/bin/sh
# Runs every benchmark of the project (a release build) and prints one
# table: component, figure, value, target, met or MISSED.
#   tools/bench-all.sh [--gpu]   (--gpu adds the sandbox's, on a GPU machine)
set -eu
cd "$(dirname "$0")/.."
B=${KCLAW_BENCH_BUILD:-build-rel}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DKC_TESTS=OFF >/dev/null
cmake --build "$B" -j "$(nproc)" >/dev/null
out=$(mktemp)
for b in "$B"/bin/kclaw-bench-*; do
	case "$b" in
	*sandbox*) [ "${1:-}" = "--gpu" ] || continue ;;
	esac
	echo "running $(basename "$b")..." >&2
	"$b" --json >>"$out" 2>/dev/null || echo "{\"component\":\"$(basename "$b")\",\"name\":\"(failed to run)\",\"value\":0,\"unit\":\"\",\"target\":\"\",\"met\":false}" >>"$out"
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
print(f"{'component':<12} {'figure':<48} {'value':>12} {'unit':<10} {'target':<18} status")
for r in rows:
    st = "" if r["met"] is None else ("met" if r["met"] else "MISSED")
    print(f"{r['component']:<12} {r['name']:<48} {r['value']:>12.4g} {r['unit']:<10} {r['target']:<18} {st}")
PY
rm -f "$out"
