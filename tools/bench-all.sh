#!/bin/sh
# Runs every benchmark of the project (a release build) and prints one
# table: component, figure, value, target, met or MISSED.
#   tools/bench-all.sh          bus, store, orchestrator, memory (no GPU needed)
#   tools/bench-all.sh --gpu    adds the sandbox's (on a machine with a GPU)
set -eu
cd "$(dirname "$0")/.."
B=${KCLAW_BENCH_BUILD:-build-rel}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DKC_TESTS=ON >/dev/null
cmake --build "$B" -j "$(nproc)" --target kclaw-bench-bus kclaw-bench-store \
	kclaw-orch-bench kc-double memory_bench kclaw-sandbox-bench >/dev/null
out=$(mktemp -d)
for b in bus store; do
	echo "running kclaw-bench-$b..." >&2
	"$B/bin/kclaw-bench-$b" --json >"$out/$b.jsonl" 2>/dev/null || true
done
echo "running kclaw-orch-bench (1000 tasks)..." >&2
"$B/bin/kclaw-orch-bench" --tasks 1000 >"$out/orch.txt" 2>&1 || true
echo "running memory_bench (10000 learned attempts)..." >&2
rm -rf "$out/memdb"
"$B/bin/memory_bench" "$out/memdb" 10000 store/knowledge >"$out/memory.txt" 2>&1 || true
if [ "${1:-}" = "--gpu" ]; then
	echo "running kclaw-sandbox-bench (GPU)..." >&2
	"$B/bin/kclaw-sandbox-bench" --runs 5 >"$out/sandbox.txt" 2>&1 || true
fi
python3 - "$out" <<'PY'
import json, os, re, sys
d = sys.argv[1]
rows = []
for b in ("bus", "store"):
    p = os.path.join(d, b + ".jsonl")
    rows += [json.loads(l) for l in open(p) if l.startswith("{")] if os.path.exists(p) else []
def grab(path, pattern):
    try:
        m = re.search(pattern, open(path).read())
        return float(m.group(1)) if m else None
    except OSError:
        return None
def row(comp, name, v, unit, target, ok):
    rows.append({"component": comp, "name": name, "value": v if v is not None else float("nan"),
                 "unit": unit, "target": target, "met": None if ok is None or v is None else ok(v)})
o = os.path.join(d, "orch.txt")
row("orch", "transitions/s, synced durable writes", grab(o, r"transitions\s+\d+ in [\d.]+ s: (\d+) /s"), "/s", ">= 500/s", lambda v: v >= 500)
row("orch", "resident memory per idle task", grab(o, r"per idle task\s+([\d.]+) KB"), "KB", "< 64 KB", lambda v: v < 64)
m = os.path.join(d, "memory.txt")
row("memory", "retrieval with 10000 learned attempts", grab(m, r"retriev\w*[^\n]*?([\d.]+) ms"), "ms", "", None)
s = os.path.join(d, "sandbox.txt")
if os.path.exists(s):
    row("sandbox", "evaluation overhead, 64M elements, median", grab(s, r"evaluation overhead[^\n]*median ([\d.]+) ms"), "ms", "< 300 ms", lambda v: v < 300)
    row("sandbox", "fault to ready, median", grab(s, r"to ready[^\n]*median ([\d.]+) ms"), "ms", "< 1500 ms", lambda v: v < 1500)
    row("sandbox", "compile (NVRTC, cold)", grab(s, r"compile[^\n]*?cold[^\n]*?([\d.]+) ms"), "ms", "", None)
print(f"{'component':<10} {'figure':<46} {'value':>11} {'unit':<9} {'target':<14} status")
for r in rows:
    st = "" if r["met"] is None else ("met" if r["met"] else "MISSED")
    print(f"{r['component']:<10} {r['name']:<46} {r['value']:>11.4g} {r['unit']:<9} {r['target']:<14} {st}")
PY
rm -rf "$out"
