#!/bin/sh
# cli_kernelbench: `kclaw kernelbench KB_DIR` end to end without a GPU or
# PyTorch. The service is real (kclawd under `kclaw up`); its agents and
# sandbox are the scripted worker (kc-double: each problem's source carries
# its script), the converter the stand-in that speaks kb2bundle's batch
# protocol (tests/tasks/kb_convert_standin.py). Checks the plan (ids stable,
# changed by the settings), the refusal where PyTorch is missing (the real
# kb2bundle.py, nothing started), a run killed mid-conversion and resumed
# after `kclaw up --stop` (no problem converted or submitted twice, none
# lost), the progress lines, and the report's figures, exactly.
set -u
B="$KCLAW_BIN"
K="$B/kclaw"
SRC="$KCLAW_SRC"
STANDIN="$SRC/tests/tasks/kb_convert_standin.py"
T=$(mktemp -d /tmp/kc-kb-XXXXXX)
H="$T/home"
RUN=
cleanup() {
	[ -n "$RUN" ] && kill "$RUN" 2>/dev/null
	"$K" --home "$H" up --stop >/dev/null 2>&1
	wait 2>/dev/null
	rm -rf "$T"
}
fail() {
	echo "FAIL: $*" >&2
	tail -n 5 "$H"/run/*.log >&2 2>/dev/null
	cleanup
	exit 1
}
unset KCLAW_HOME KCLAW_LLM_MODEL KCLAW_LLM_REPLAY KCLAW_LLM_BASE_URL || true
export KCLAW_AGENT_BIN="$B/kc-double" KCLAW_SANDBOX_BIN="$B/kc-double"

# Six problems in KernelBench's layout, each a KernelBench-style module
# whose first line is kc-double's script: Alpha 4x eager (3x compile),
# Beta never correct, Broken refused by the converter, Gamma at matched
# precision 0.25x, Zero degenerate (its output varies 1e-9), Delta 8x / 8x.
mkdir -p "$T/kb/level1" "$T/kb/level2" "$T/kb/level3"
problem() {
	cat >"$T/kb/$1" <<EOF
# scripted problem: $2
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(1024)]


def get_init_inputs():
    return []
EOF
}
problem level1/1_Alpha.py "seeds=ok:2.0;opt=1.0;ref=4.0;compile=3.0"
problem level1/2_Beta.py "seeds=wrong;repair=wrong;ref=4.0"
problem level1/3_Broken.py "standin: broken"
problem level2/1_Gamma.py "seeds=ok:8.0;opt=16.0;ref=4.0;compile=2.0;matched=0.25"
problem level2/80_Zero.py "seeds=ok:1.0;ref=4.0;refcheck=outputs:out@1e-9"
problem level3/1_Delta.py "seeds=ok:2.0;opt=0.5;ref=4.0;compile=4.0"
touch "$T/kb/level1/__init__.py"

# The plan: KernelBench's order, ids that a second plan repeats and other
# settings change; --problems and --levels select.
ARGS="--out $T/out --converter $STANDIN --rounds 3 --gpus 1"
"$K" --home "$H" kernelbench "$T/kb" $ARGS --dry-run >"$T/plan1" || fail "dry run"
"$K" --home "$H" kernelbench "$T/kb" $ARGS --dry-run >"$T/plan2" || fail "dry run"
cmp -s "$T/plan1" "$T/plan2" || fail "the plan's ids changed: $(diff "$T/plan1" "$T/plan2")"
[ "$(awk 'NR > 1 && NF == 4 {print $4}' "$T/plan1" | tr '\n' ' ')" = \
	"level1/1_Alpha.py level1/2_Beta.py level1/3_Broken.py level2/1_Gamma.py level2/80_Zero.py level3/1_Delta.py " ] ||
	fail "plan order: $(cat "$T/plan1")"
awk 'NR > 1 && NF == 4 {print $2}' "$T/plan1" | grep -Evq '^kb[0-9a-f]{14}$' &&
	fail "task ids: $(cat "$T/plan1")"
grep -q "^6 problem(s); 6 to convert" "$T/plan1" || fail "plan summary: $(cat "$T/plan1")"
"$K" --home "$H" kernelbench "$T/kb" --out "$T/out" --rounds 4 --dry-run >"$T/plan3"
[ "$(awk 'NR == 2 {print $2}' "$T/plan1")" != "$(awk 'NR == 2 {print $2}' "$T/plan3")" ] ||
	fail "--rounds did not change the ids"
"$K" kernelbench "$T/kb" --out "$T/out" --levels 2 --problems '*Zero*' --dry-run >"$T/plan4"
grep -q "^1 problem(s)" "$T/plan4" && grep -q "level2/80_Zero.py$" "$T/plan4" ||
	fail "--levels 2 --problems: $(cat "$T/plan4")"
"$K" kernelbench "$T/kb" --out "$T/out" --problems 'L3_*' --dry-run | grep -q "^1 problem(s)" ||
	fail "--problems by task name"

# Refusals: usage, a missing KB_DIR, nothing matched, no PyTorch (the real
# kb2bundle.py under share/kclaw, found from this kclaw): nothing started.
"$K" kernelbench "$T/kb" --precision fast >/dev/null 2>&1
[ $? -eq 2 ] || fail "--precision fast must exit 2"
"$K" kernelbench "$T/kb" --levels 1,1 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--levels 1,1 must exit 2"
"$K" kernelbench "$T/none" --out "$T/o" >/dev/null 2>&1
[ $? -eq 3 ] || fail "a missing KB_DIR must exit 3"
"$K" --home "$T/h0" kernelbench "$T/kb" --out "$T/o0" --problems 'nothing*' >/dev/null 2>"$T/err"
[ $? -eq 1 ] && grep -q "nothing ran" "$T/err" || fail "no match: $(cat "$T/err")"
env KCLAW_PYTHON=python3 "$K" --home "$T/h0" kernelbench "$T/kb" --out "$T/o0" >/dev/null 2>"$T/err"
rc=$?
if python3 -c 'import torch' 2>/dev/null; then
	echo "PyTorch is installed here: the refusal is not checked"
else
	[ $rc -eq 1 ] || fail "no PyTorch must exit 1, not $rc: $(cat "$T/err")"
	grep -q "the converter ($SRC/tools/kernelbench/kb2bundle.py) cannot convert: PyTorch is not installed for .*KCLAW_PYTHON" "$T/err" ||
		fail "no PyTorch: $(cat "$T/err")"
	[ ! -e "$T/h0/run" ] || fail "a service was started without PyTorch"
fi

# The run, killed while the converter holds the last problem: four tasks
# submitted, Broken refused, Delta not converted.
KB_STANDIN_LOG="$T/conv.log" KB_STANDIN_HOLD=1_Delta.py KB_STANDIN_HOLD_FILE="$T/held" \
	"$K" --home "$H" kernelbench "$T/kb" $ARGS >"$T/run1.out" 2>&1 &
RUN=$!
i=0
until [ -e "$T/held" ]; do
	i=$((i + 1)); [ $i -gt 1200 ] && fail "the converter never reached Delta: $(cat "$T/run1.out")"
	kill -0 "$RUN" 2>/dev/null || fail "kernelbench exited early: $(cat "$T/run1.out")"
	sleep 0.05
done
kill -9 "$RUN"
wait "$RUN" 2>/dev/null
RUN=
[ "$(tr '\n' ' ' <"$T/conv.log")" = "1_Alpha.py 2_Beta.py 3_Broken.py 1_Gamma.py 80_Zero.py 1_Delta.py " ] ||
	fail "first run's conversions: $(cat "$T/conv.log")"
"$K" --home "$H" up --stop >/dev/null || fail "up --stop after the kill"

# The same command again: the service restarts, the four tasks resume,
# only Broken (no bundle) and Delta are converted, Delta submitted.
: >"$T/conv.log"
KB_STANDIN_LOG="$T/conv.log" "$K" --home "$H" kernelbench "$T/kb" $ARGS --keep \
	>"$T/run2.out" 2>&1 || fail "the resumed run exited $?: $(cat "$T/run2.out")"
[ "$(tr '\n' ' ' <"$T/conv.log")" = "3_Broken.py 1_Delta.py " ] ||
	fail "resumed run's conversions: $(cat "$T/conv.log")"
grep -q "^kclaw kernelbench: resuming: 4 of 6 problem(s) are tasks already" "$T/run2.out" ||
	fail "no resume line: $(cat "$T/run2.out")"
grep -q "^kclaw kernelbench: converted 1 problem(s) in .* in one process, 1 failed$" "$T/run2.out" ||
	fail "conversion line: $(cat "$T/run2.out")"
# The progress ends with every level ended (lines: stdout is no terminal).
for want in "L1 3/3 ended: done 1, failed 2, running 0, eta 0s" \
	"L2 2/2 ended: done 2, failed 0, running 0, eta 0s" \
	"L3 1/1 ended: done 1, failed 0, running 0, eta 0s" \
	"all 6/6 ended: done 4, failed 2, running 0, eta 0s"; do
	grep -q "^kernelbench: $want$" "$T/run2.out" || fail "no '$want': $(cat "$T/run2.out")"
done

# No task twice, none lost: five tasks in the service, the ids of run.json.
"$K" --home "$H" status --json >"$T/status.json" || fail "status --json"
python3 - "$T/status.json" "$T/out/run.json" <<'PY' || fail "tasks: $(cat "$T/status.json")"
import json, sys
st = json.load(open(sys.argv[1]))
run = json.load(open(sys.argv[2]))
ids = sorted(t["id"] for t in st["tasks"])
assert len(ids) == len(set(ids)) == 5, ids
want = sorted(p["task_id"] for p in run["problems"] if p["state"] != "not_run")
assert ids == want, (ids, want)
byname = {p["name"]: p for p in run["problems"]}
assert byname["L1_3_Broken"]["state"] == "not_run", byname["L1_3_Broken"]
assert "not converted: forward returned NoneType" in byname["L1_3_Broken"]["error"]
assert byname["L3_1_Delta"]["state"] == "done", byname["L3_1_Delta"]
assert run["converted"] == 1 and run["convert_failed"] == 1, run
PY

# The report, in the table and in OUT/report.json, exactly.
for f in report.txt report.json; do
	[ -s "$T/out/$f" ] || fail "no $f"
done
python3 - "$T/out/report.json" <<'PY' || fail "report.json: $(cat "$T/out/report.json")"
import json, math, sys
r = json.load(open(sys.argv[1]))
def close(a, b):
    assert a is not None and abs(a - b) < 1e-9, (a, b)
lv = {l["level"]: l for l in r["levels"]}
assert sorted(lv) == ["L1", "L2", "L3"], lv.keys()
l1, l2, l3, s = lv["L1"], lv["L2"], lv["L3"], r["set"]
# L1: Alpha 4x (3x compile), Beta failed; Broken never a task.
assert (l1["problems"], l1["correct"], l1["degenerate"]) == (2, 1, 0), l1
close(l1["eager"]["geomean_correct"], 4)
close(l1["eager"]["geomean_all_failure_1x"], 2)
close(l1["eager"]["fast_2"], 0.5)
close(l1["torch_compile"]["geomean_all_failure_1x"], math.sqrt(3))
# L2: Zero degenerate and left out; Gamma at matched precision 0.25x.
assert (l2["problems"], l2["correct"], l2["degenerate"], l2["matched_precision"]) == (1, 1, 1, 1), l2
close(l2["eager"]["mean_correct"], 0.25)
assert l2["eager"]["fast_1"] == 0
close(l2["torch_compile"]["geomean_correct"], 0.25)
close(l3["eager"]["geomean_correct"], 8)
# Overall: 4 problems, 3 correct; eager 4, 0.25, 8 (and Beta as 1.0x).
assert (s["problems"], s["correct"], s["degenerate"]) == (4, 3, 1), s
close(s["pass_rate"], 0.75)
close(s["eager"]["geomean_correct"], 2.0)
close(s["eager"]["geomean_all_failure_1x"], 8 ** 0.25)
close(s["eager"]["mean_correct"], (4 + 0.25 + 8) / 3)
close(s["torch_compile"]["geomean_correct"], 6 ** (1 / 3))
close(s["torch_compile"]["geomean_all_failure_1x"], 6 ** 0.25)
close(s["torch_compile"]["fast_1"], 0.5)
assert s["torch_compile"]["known"] == 3, s
# Tokens: the tasks' sums, per level and over the set.
for name, l in lv.items():
    assert l["tokens"] == sum(t["tokens"] for t in r["tasks"] if t["level"] == name), l
assert s["tokens"] == sum(t["tokens"] for t in r["tasks"]) > 0
assert s["task_wall_s"] > 0 and s["wall_s"] > 0
deg = r["degenerate"]
assert [d["name"] for d in deg] == ["L2_80_Zero"], deg
assert deg[0]["reason"] == ("degenerate problem: out varies 1e-09 between input sets, "
                            "the tolerance admits 0.01: a constant could pass"), deg
c = r["conditions"]
assert c["tolerance"] == "tolerance atol 0.01, rtol 0.01, max_rel_norm 0.01", c
assert c["precision"].startswith("precision warn "), c
assert c["not_run"] == 1, c
gamma = [t for t in r["tasks"] if t["name"] == "L2_1_Gamma"][0]
close(gamma["speedup_matched_precision"], 0.25)
close(gamma["speedup"], 0.5)
PY
grep -q "^KernelBench report: tolerance atol 0.01, rtol 0.01, max_rel_norm 0.01; precision warn" "$T/out/report.txt" ||
	fail "report.txt header: $(cat "$T/out/report.txt")"
grep -q "^  L2_80_Zero  .* degenerate problem: out varies 1e-09" "$T/out/report.txt" ||
	fail "report.txt: no degenerate list"
sed -n '/^over PyTorch eager/,/^$/p' "$T/out/report.txt" >"$T/eager.txt"
grep -q "^all  *4  *3/4 75.0%  *2/4 50.0%  *2/4 50.0%  *2/4 50.0%  *4.08x  *2.00x  *1.68x$" "$T/eager.txt" ||
	fail "report.txt, all over eager: $(cat "$T/out/report.txt")"
cmp -s "$T/out/report.txt" "$T/run2.out" && fail "stdout is not only the report"
# The degenerate task's end says so.
zero=$(python3 -c 'import json,sys; print([p["task_id"] for p in json.load(open(sys.argv[1]))["problems"] if p["name"] == "L2_80_Zero"][0])' "$T/out/run.json")
"$K" --home "$H" watch "$zero" --no-follow >"$T/zero.txt" 2>&1
grep -q "degenerate problem: out varies 1e-09 between input sets, the tolerance admits 0.01" "$T/zero.txt" ||
	fail "the degenerate task's end: $(cat "$T/zero.txt")"

# A third run: everything is a task already; nothing submitted again, the
# same report; --compare adds the published rows with their notes.
"$K" --home "$H" kernelbench "$T/kb" $ARGS --keep --compare >"$T/run3.out" 2>&1 ||
	fail "third run exited $?: $(cat "$T/run3.out")"
grep -q "resuming: 5 of 6 problem(s) are tasks already (5 ended)" "$T/run3.out" ||
	fail "third run: $(cat "$T/run3.out")"
"$K" --home "$H" status --json | python3 -c '
import json, sys
assert len(json.load(sys.stdin)["tasks"]) == 5' || fail "the third run added tasks"
grep -q "^CUDA Agent  *L3  *-  *92.0%" "$T/run3.out" || fail "--compare: $(cat "$T/run3.out")"
grep -q "^\[4\] KernelBench leaderboard" "$T/run3.out" || fail "--compare notes"
grep -q "^kclaw  *all  *75.0%  *50.0%  *1.82x  *4.08x  *\[0\]$" "$T/run3.out" ||
	fail "--compare kclaw row: $(cat "$T/run3.out")"
# On a terminal: a bar per level, redrawn in place.
if command -v script >/dev/null 2>&1; then
	TERM=xterm script -qec "'$K' --home '$H' kernelbench '$T/kb' $ARGS --keep" /dev/null \
		>"$T/tty.out" 2>&1 || fail "the run on a terminal exited $?: $(cat "$T/tty.out")"
	grep -q "L1   \[####################\]   3/3   done 1 failed 2 running 0 eta 0s" "$T/tty.out" ||
		fail "no bar on a terminal: $(cat "$T/tty.out")"
	grep -q "^kernelbench: L1" "$T/tty.out" && fail "lines on a terminal: $(cat "$T/tty.out")"
fi
"$K" --home "$H" report --by level --json $(python3 -c '
import json, sys
print(" ".join(p["task_id"] for p in json.load(open(sys.argv[1]))["problems"] if p["state"] != "not_run"))' "$T/out/run.json") \
	>"$T/again.json" || fail "report --by level"
python3 -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["levels"] == b["levels"], (a["levels"], b["levels"])' "$T/again.json" "$T/out/report.json" ||
	fail "kclaw report --by level differs from the command's"

cleanup
echo "kernelbench ok"
