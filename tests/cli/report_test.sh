#!/bin/sh
# kclaw report (per task, --by level) and kclaw status ID on task records
# with known figures, served by a stand-in orchestrator (cli_orch_standin):
# exact fast_p, means and geometric means per KernelBench level and over
# the set, and the tokens per role with their cost under kclaw.json's
# prices, in the table and in --json.
set -u
B="$KCLAW_BIN"
K="$B/kclaw"
T=$(mktemp -d /tmp/kc-report-XXXXXX)
ORCH=
cleanup() { [ -n "$ORCH" ] && kill "$ORCH" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
fail() { echo "FAIL: $*" >&2; cleanup; exit 1; }

mkdir -p "$T/home"
export KCLAW_HOME="$T/home" KCLAW_API_URL="ipc://$T/api.ipc"
# gpt-5-mini matches both globs: the first in the file wins.
cat >"$T/home/kclaw.json" <<'JSON'
{"prices": {"gpt-5-mini*": {"prompt": 0.25, "completion": 2},
            "gpt-5*": {"prompt": 1.25, "completion": 10,
                       "cached_prompt": 0.125, "reasoning": 20}}}
JSON

# Per level, the speedups over eager (record speedup, else reference/best)
# and over torch.compile (compile_speedup, else torch_compile_ms/best):
#   L1: 2 (1), 1.5 (0.5), 0.5 (-), FAILED     L2: 4 (2), 1 (0.5)
#   L10: CANCELLED (a kernel, but not DONE)   other: 9 (-), 3 (3)
cat >"$T/records.json" <<'JSON'
[
 {"id": "t1", "spec": {"name": "L1_1_A"}, "state": "DONE", "best_id": "c1",
  "best_ms": 1, "reference_ms": 2, "speedup": 2, "compile_speedup": 1,
  "created_unix_ms": 1, "tokens": 1201010,
  "usage": [
   {"role": "GENERATOR", "model": "gpt-5-2025", "prompt_tokens": 1000000,
    "completion_tokens": 200000, "reasoning_tokens": 50000,
    "cached_tokens": 400000, "calls": 3, "failed_calls": 1},
   {"role": "PLANNER", "model": "local-qwen", "prompt_tokens": 1000,
    "completion_tokens": 10, "calls": 1}]},
 {"id": "t2", "spec": {"name": "L1_2_B"}, "state": "DONE", "best_id": "c2",
  "best_ms": 2, "reference_ms": 3, "torch_compile_ms": 1,
  "created_unix_ms": 2},
 {"id": "t3", "spec": {"name": "L1_3_C"}, "state": "DONE", "best_id": "c3",
  "best_ms": 4, "reference_ms": 2, "speedup": 0.5, "created_unix_ms": 3},
 {"id": "t4", "spec": {"name": "L1_4_D"}, "state": "FAILED",
  "error": "generator job failed 4 times", "created_unix_ms": 4},
 {"id": "t5", "spec": {"name": "L2_7_E"}, "state": "DONE", "best_id": "c5",
  "best_ms": 1, "reference_ms": 4, "speedup": 4, "compile_speedup": 2,
  "created_unix_ms": 5,
  "usage": [
   {"role": "GENERATOR", "model": "gpt-5-mini", "prompt_tokens": 2000000,
    "completion_tokens": 100000, "calls": 2},
   {"role": "OPTIMIZER", "model": "gpt-5-2025", "prompt_tokens": 500000,
    "completion_tokens": 500000, "reasoning_tokens": 500000,
    "cached_tokens": 500000, "calls": 1}]},
 {"id": "t6", "spec": {"name": "L2_9_F"}, "state": "DONE", "best_id": "c6",
  "best_ms": 1, "reference_ms": 1, "speedup": 1, "compile_speedup": 0.5,
  "created_unix_ms": 6,
  "usage": [
   {"role": "GENERATOR", "model": "gpt-5-mini", "prompt_tokens": 1000000,
    "calls": 1, "failed_calls": 1}]},
 {"id": "t7", "spec": {"name": "L10_1_G"}, "state": "CANCELLED",
  "best_id": "c7", "best_ms": 1, "reference_ms": 5, "speedup": 5,
  "created_unix_ms": 7},
 {"id": "t8", "spec": {"name": "19_ReLU"}, "state": "DONE", "best_id": "c8",
  "best_ms": 1, "reference_ms": 9, "speedup": 9, "created_unix_ms": 8,
  "state_detail": "7 of 8 tensor files, 175 MB of 200 MB"},
 {"id": "t9", "spec": {"name": "L1x_y"}, "state": "DONE", "best_id": "c9",
  "best_ms": 1, "reference_ms": 3, "speedup": 3, "compile_speedup": 3,
  "created_unix_ms": 9}
]
JSON

"$B/cli_orch_standin" "$KCLAW_API_URL" "$T/records.json" "$T/ready" 2>"$T/standin.log" &
ORCH=$!
i=0
until [ -e "$T/ready" ]; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "the stand-in never listened: $(cat "$T/standin.log")"
	kill -0 "$ORCH" 2>/dev/null || fail "the stand-in exited: $(cat "$T/standin.log")"
	sleep 0.05
done

"$K" report --by level --json >"$T/level.json" || fail "report --by level --json exited $?"
python3 - "$T/level.json" <<'PY' || fail "report --by level --json: $(cat "$T/level.json")"
import json, math, sys
rep = json.load(open(sys.argv[1]))

def gm(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))

def figures(level, tasks, eager, compiled):
    """The expected figures of a set: eager speedups of its successful
    tasks, and the known torch.compile ones."""
    s = len(eager)
    f = {"tasks": tasks, "success": s, "success_rate": s / tasks,
         "fast_1": sum(x >= 1 for x in eager) / tasks,
         "fast_1_5": sum(x >= 1.5 for x in eager) / tasks,
         "fast_2": sum(x >= 2 for x in eager) / tasks,
         "mean_speedup": sum(eager) / s if s else None,
         "geomean_speedup": gm(eager) if s else None,
         "torch_compile_known": len(compiled),
         "fast_1_vs_torch_compile":
             sum(x >= 1 for x in compiled) / len(compiled) if compiled else None,
         "mean_speedup_vs_torch_compile":
             sum(compiled) / len(compiled) if compiled else None,
         "geomean_speedup_vs_torch_compile": gm(compiled) if compiled else None}
    if level:
        f["level"] = level
    return f

def check(what, got, want):
    for k, v in want.items():
        g = got.get(k, "missing")
        if v is None or isinstance(v, str) or k in ("tasks", "success",
                                                    "torch_compile_known"):
            ok = g == v
        else:
            ok = g is not None and abs(g - v) <= 1e-12 * max(1, abs(v))
        assert ok, "%s %s = %r, expected %r" % (what, k, g, v)

levels = [figures("L1", 4, [2, 1.5, 0.5], [1, 0.5]),
          figures("L2", 2, [4, 1], [2, 0.5]),
          figures("L10", 1, [], []),
          figures("other", 2, [9, 3], [3])]
got = rep["levels"]
assert [l["level"] for l in got] == ["L1", "L2", "L10", "other"], got
for g, w in zip(got, levels):
    check(w["level"], g, w)
# The literal figures, so that a wrong formula above cannot hide.
assert got[0]["fast_1"] == 0.5 and got[0]["fast_1_5"] == 0.5 and got[0]["fast_2"] == 0.25
assert got[1]["fast_1"] == 1.0 and got[1]["fast_2"] == 0.5
assert abs(got[0]["geomean_speedup"] - 1.5 ** (1 / 3)) < 1e-12
assert abs(got[0]["geomean_speedup_vs_torch_compile"] - math.sqrt(0.5)) < 1e-12
assert abs(got[1]["geomean_speedup"] - 2.0) < 1e-12
assert abs(got[3]["geomean_speedup"] - math.sqrt(27)) < 1e-12
check("set", rep["set"], figures(None, 9, [2, 1.5, 0.5, 4, 1, 9, 3],
                                 [1, 0.5, 2, 0.5, 3]))
assert rep["set"]["fast_1_5"] == 5 / 9 and rep["set"]["fast_2"] == 4 / 9
assert abs(rep["set"]["geomean_speedup"] - 162 ** (1 / 7)) < 1e-12

tasks = {t["name"]: t for t in rep["tasks"]}
assert [t["id"] for t in rep["tasks"]] == ["t%d" % i for i in range(1, 10)]
assert tasks["L1_2_B"]["speedup"] == 1.5, tasks["L1_2_B"]
assert tasks["L1_2_B"]["speedup_vs_torch_compile"] == 0.5, tasks["L1_2_B"]
assert tasks["L1_3_C"]["speedup_vs_torch_compile"] is None
assert tasks["L1x_y"]["level"] == "other" and tasks["L10_1_G"]["level"] == "L10"

# Cost: prompt at its price, cached prompt at cached_prompt, completion at
# its price, reasoning at reasoning; cached_prompt and reasoning default to
# prompt and completion; the first glob wins.
def close(a, b):
    return a is not None and abs(a - b) < 1e-9

a, e, f = tasks["L1_1_A"], tasks["L2_7_E"], tasks["L2_9_F"]
assert close(a["usage"][0]["cost_usd"], 0.75 + 0.05 + 1.5 + 1.0), a
assert a["usage"][1]["cost_usd"] is None and a["cost_usd"] is None, a
assert a["unpriced"] == ["local-qwen"], a
assert a["usage"][0]["role"] == "generator" and a["usage"][0]["failed_calls"] == 1
assert close(e["usage"][0]["cost_usd"], 0.5 + 0.2), e
assert close(e["usage"][1]["cost_usd"], 0.0625 + 10), e
assert close(e["cost_usd"], 10.7625) and e["unpriced"] == [], e
assert close(f["cost_usd"], 0.25), f
assert tasks["19_ReLU"]["usage"] == [] and tasks["19_ReLU"]["cost_usd"] is None

# Over the set: summed per role and model.
s = rep["set"]
u = {(x["role"], x["model"]): x for x in s["usage"]}
assert len(u) == 4, s["usage"]
g = u[("generator", "gpt-5-mini")]
assert (g["prompt_tokens"], g["completion_tokens"], g["calls"], g["failed_calls"]) == \
    (3000000, 100000, 3, 1), g
assert close(g["cost_usd"], 0.95), g
assert s["cost_usd"] is None and s["unpriced"] == ["local-qwen"], s
PY

# The same set in the plain report, per task; --json without --by has no
# levels.
"$K" report --json >"$T/plain.json" || fail "report --json exited $?"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert "levels" not in r and len(r["tasks"]) == 9, r
assert r["set"]["fast_2"] == 4 / 9, r["set"]' "$T/plain.json" || fail "report --json: $(cat "$T/plain.json")"

# Tables.
"$K" report --by level >"$T/level.txt" || fail "report --by level exited $?"
# The eager block: problems, correct, fast_p, mean, geomean over the
# correct ones and over all (a failure as 1.0x: L1 (2*1.5*0.5*1)^(1/4)).
sed -n '/^over PyTorch eager/,/^$/p' "$T/level.txt" >"$T/eager.txt"
grep -q "^L1  *4  *3/4 75.0%  *2/4 50.0%  *2/4 50.0%  *1/4 25.0%  *1.33x  *1.14x  *1.11x$" "$T/eager.txt" ||
	fail "report --by level, L1: $(cat "$T/level.txt")"
grep -q "^L10  *1  *0/1 0.0%  *0/1 0.0%  *0/1 0.0%  *0/1 0.0%  *-  *-  *1.00x$" "$T/eager.txt" ||
	fail "report --by level, L10: $(cat "$T/level.txt")"
[ "$(awk '$2 ~ /^[0-9]+$/ {print $1}' "$T/eager.txt" | tr '\n' ' ')" = "L1 L2 L10 other all " ] ||
	fail "report --by level: levels out of order: $(cat "$T/level.txt")"
grep -q "^all  *9  *7/9 77.8%  *6/9 66.7%  *5/9 55.6%  *4/9 44.4%  *3.00x" "$T/eager.txt" ||
	fail "report --by level, all: $(cat "$T/level.txt")"
# Over torch.compile: fast_p over all problems (L1: 1 of 4 at >= 1x).
sed -n '/^over torch.compile/,/^$/p' "$T/level.txt" >"$T/compile.txt"
grep -q "^L1  *4  *2/3  *1/4 25.0%  *0/4 0.0%  *0/4 0.0%  *0.75x  *0.71x  *0.79x$" "$T/compile.txt" ||
	fail "report --by level, L1 over torch.compile: $(cat "$T/level.txt")"
grep -q "^KernelBench report: tolerance the service's default; precision warn (lower precision passes with a warning)$" "$T/level.txt" ||
	fail "report --by level: no header: $(cat "$T/level.txt")"
grep -q "^  generator  *gpt-5-mini  *3000000  *100000  *0  *0  *3  *1  *\$0.9500$" "$T/level.txt" ||
	fail "report: no set usage: $(cat "$T/level.txt")"
grep -q "no price for model local-qwen; add it to \"prices\" in $T/home/kclaw.json" "$T/level.txt" ||
	fail "report: the unpriced model is not named: $(cat "$T/level.txt")"
"$K" report >"$T/plain.txt" || fail "report exited $?"
grep -q "^L2_7_E .* \$10.7625$" "$T/plain.txt" || fail "report: no task cost: $(cat "$T/plain.txt")"
grep -q "^L1_1_A .* -$" "$T/plain.txt" || fail "report: a partly priced task has a cost: $(cat "$T/plain.txt")"
grep -q "^fast_1.5 5/9 (56%), fast_2 4/9 (44%)$" "$T/plain.txt" || fail "report: no fast_1.5: $(cat "$T/plain.txt")"

# kclaw status ID: tokens per role and cost; --json carries them.
"$K" status t5 >"$T/t5.txt" || fail "status t5 exited $?"
grep -q "^    generator  *gpt-5-mini  *2000000  *100000  *0  *0  *2  *0  *\$0.7000$" "$T/t5.txt" ||
	fail "status t5: $(cat "$T/t5.txt")"
grep -q "^    optimizer  *gpt-5-2025  *500000  *500000  *500000  *500000  *1  *0  *\$10.0625$" "$T/t5.txt" ||
	fail "status t5: $(cat "$T/t5.txt")"
grep -q "^    total  *2500000  *600000  *500000  *500000  *3  *0  *\$10.7625$" "$T/t5.txt" ||
	fail "status t5: no total: $(cat "$T/t5.txt")"
"$K" status t1 | grep -q "^    no price for model local-qwen" || fail "status t1 names no unpriced model"
"$K" status t8 >"$T/t8.txt" || fail "status t8"
grep -q "usage" "$T/t8.txt" && fail "status t8 shows usage it has not: $(cat "$T/t8.txt")"
# The state's detail (an import's progress) is shown when the record has one.
grep -q "^  detail     7 of 8 tensor files, 175 MB of 200 MB$" "$T/t8.txt" ||
	fail "status t8 shows no state detail: $(cat "$T/t8.txt")"
"$K" status t5 | grep -q "^  detail" && fail "status t5 shows a detail it has not"
"$K" status t5 --json | python3 -c '
import json, sys
t = json.load(sys.stdin)
assert t["id"] == "t5" and abs(t["cost_usd"] - 10.7625) < 1e-9, t
assert [u["role"] for u in t["usage"]] == ["generator", "optimizer"], t
assert abs(t["usage"][0]["cost_usd"] - 0.7) < 1e-9 and t["unpriced"] == [], t' ||
	fail "status t5 --json"

# Mistakes: an unknown --by, a price table that cannot be read.
"$K" report --by model >/dev/null 2>"$T/err"
[ $? -eq 2 ] || fail "report --by model must exit 2"
grep -q "takes 'level'" "$T/err" || fail "report --by model: $(cat "$T/err")"
echo '{"prices": {"gpt-5*": {"prompt": "1.25", "completion": 10}}}' >"$T/home/kclaw.json"
"$K" report >/dev/null 2>"$T/err" && fail "a bad price table was accepted"
grep -q 'prices\["gpt-5\*"\].prompt must be a number' "$T/err" || fail "bad price: $(cat "$T/err")"
echo '{"prices": {"gpt-5*": {"prompt": 1.25}}}' >"$T/home/kclaw.json"
"$K" status t5 >/dev/null 2>"$T/err" && fail "a price without completion was accepted"
grep -q 'prices\["gpt-5\*"\].completion' "$T/err" || fail "no completion: $(cat "$T/err")"

cleanup
echo "report ok"
