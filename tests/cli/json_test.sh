#!/bin/sh
# Every `--json` of kclaw against a real deployment (`kclaw up` with test
# double agents and sandboxes) follows docs/cli.md's convention: one JSON
# document (watch: JSON lines), enums in lower case as task.json spells
# them, null for what is missing (no empty strings, no 0 for an unknown
# time), no base64 (bytes as NAME_bytes), and a failed command's error as
# {"error": {"code", "exit", "message"}} on stdout with its non-zero exit.
set -u
K="$KCLAW_BIN/kclaw"
H=$(mktemp -d /tmp/kc-json-XXXXXX)
C="python3 $KCLAW_SRC/tests/cli/json_check.py"
export KCLAW_AGENT_BIN="$KCLAW_BIN/kc-double"
export KCLAW_SANDBOX_BIN="$KCLAW_BIN/kc-double"
unset KCLAW_HTTP_URL KCLAW_HOME
cleanup() { "$K" --home "$H" up --stop >/dev/null 2>&1; rm -rf "$H"; }
fail() { echo "FAIL: $*" >&2; tail -n 5 "$H"/run/*.log >&2; cleanup; exit 1; }
# run NAME ARGS...: kclaw's stdout into $H/NAME.json, its exit into $rc.
run() {
	n=$1
	shift
	"$K" --home "$H" "$@" >"$H/$n.json" 2>"$H/$n.err"
	rc=$?
}
doc() { $C doc "$H/$1.json" "$rc" || fail "$1: $(cat "$H/$1.json")"; }
err() {
	[ "$rc" -eq "$2" ] || fail "$1: exit $rc, want $2: $(cat "$H/$1.err")"
	$C error "$H/$1.json" "$rc" || fail "$1: $(cat "$H/$1.json")"
}

# Errors before anything runs: no orchestrator (4), a usage error (2).
run down status --json
err down 4
grep -q '"message":"kclaw status: .*kclaw up --detach' "$H/down.json" ||
	fail "the error's message is not the one on stderr: $(cat "$H/down.json")"
grep -q "kclaw up --detach" "$H/down.err" || fail "stderr lost the error"
run usage status --json --bogus
err usage 2
run up_usage up --json
err up_usage 2
run version version --json
doc version

"$K" --home "$H" up --detach --gpus 1 >/dev/null || fail "up --detach"
i=0
until "$K" --home "$H" status >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "kclawd never answered"; sleep 0.1
done

B="$H/bundle"
mkdir -p "$B"
cat >"$B/task.json" <<'JSON'
{"name": "json_copy", "tensors": [
  {"name": "x", "kind": "input", "dtype": "f32", "shape": [256],
   "init": {"dist": "normal", "mean": 0, "scale": 1}},
  {"name": "y", "kind": "output", "dtype": "f32", "shape": [256]}],
 "tolerance": {"atol": 1e-5, "rtol": 1e-5, "max_rel_norm": 1e-5},
 "budget": {"rounds": 2},
 "reference": {"kind": "cuda", "source": "ref.cu", "plan": "ref.plan.json"},
 "context": "script.txt"}
JSON
echo 'extern "C" __global__ void copy(const float *x, float *y) { y[threadIdx.x] = x[threadIdx.x]; }' >"$B/ref.cu"
echo '{"steps": [{"kernel": "copy", "grid": [1,1,1], "block": [256,1,1], "args": ["x", "y"]}]}' >"$B/ref.plan.json"
printf 'seeds=wrong,ok:2.0,ok:3.0;opt=1.0,0.5;ref=4.0' >"$B/script.txt"

# submit --wait --json: the finished TaskRecord.
run submit_wait submit "$B" --wait --json
doc submit_wait
ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$H/submit_wait.json")
python3 - "$H/submit_wait.json" <<'PY' || fail "submit --wait --json: $(cat "$H/submit_wait.json")"
import json, sys
t = json.load(open(sys.argv[1]))
assert t["state"] == "done", t["state"]
# Missing: null, not "" or 0; counts stay numbers; the FSM blob is a size.
assert t["state_detail"] is None and t["spec"]["description"] is None, t
assert t["torch_compile_ms"] is None and t["compile_speedup"] is None, t
assert t["reference_ms"] == 4 and t["round"] == 2, t
assert "fsm" not in t and t["fsm_bytes"] > 0, t
assert t["spec"]["tensors"][0]["kind"] == "input", t["spec"]["tensors"][0]
assert t["spec"]["tensors"][0]["dtype"] == "f32"
assert t["spec"]["tensors"][0]["init"]["dist"] == "normal"
assert t["spec"]["reference"]["kind"] == "cuda"
assert t["usage"][0]["role"] == "generator", t["usage"]
PY

run submit submit "$B" --json
doc submit
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["duplicate"] is False and d["task_id"], d' \
	"$H/submit.json" || fail "submit --json: $(cat "$H/submit.json")"
ID2=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["task_id"])' "$H/submit.json")
# Cancelled in time, or refused as already DONE: either way by the rules.
run cancel cancel "$ID2" --json
if [ "$rc" -eq 0 ]; then
	doc cancel
	grep -q '"state":"cancelled"' "$H/cancel.json" || fail "cancel: $(cat "$H/cancel.json")"
else
	err cancel 1
fi
run cancel_done cancel "$ID" --json
err cancel_done 1

run status_list status --json
doc status_list
python3 - "$H/status_list.json" <<'PY' || fail "status --json: $(cat "$H/status_list.json")"
import json, sys
d = json.load(open(sys.argv[1]))
procs = d["health"]["processes"]
assert {p["state"] for p in procs} <= {"running", "restarting", "crash-looping", "stopped"}, procs
assert all("last_error" in p for p in procs), procs
assert procs[0]["role"] is None and procs[1]["role"] == "generator", procs[:2]
assert all("fsm_bytes" in t and "usage" in t for t in d["tasks"]), d["tasks"]
PY
run status_one status "$ID" --json
doc status_one
run status_none status nosuchtask --json
err status_none 3

run watch watch "$ID" --no-follow --json
[ "$rc" -eq 0 ] || fail "watch: $(cat "$H/watch.err")"
$C lines "$H/watch.json" || fail "watch --json"
python3 - "$H/watch.json" <<'PY' || fail "watch --json events"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
kinds = [e["kind"] for e in evs]
assert kinds[0] == "task_submitted" and "task_finished" in kinds, kinds
assert any(e["eval_status"] == "ok" for e in evs), evs
assert all(e["eval_status"] is None for e in evs if e["kind"] == "state_changed")
assert evs[0]["candidate_id"] is None, evs[0]
PY

run result result "$ID" --json
doc result
python3 - "$H/result.json" <<'PY' || fail "result --json"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["task"]["state"] == "done" and r["best"]["eval"]["status"] == "ok"
assert sorted({h["eval"]["status"] for h in r["history"]}) == ["ok", "wrong_result"], r["history"]
assert r["best"]["diagnosis"] is None or isinstance(r["best"]["diagnosis"], dict)
PY
run result_none result nosuchtask --json
err result_none 3

run report report --json
doc report
grep -q '"state":"done"' "$H/report.json" || fail "report: $(cat "$H/report.json")"
run report_one report "$ID" --json
doc report_one
run report_none report nosuchtask --json
err report_none 3

# The memory commands, through the orchestrator that holds the store.
run mem_stats memory stats --json
doc mem_stats
run mem_methods memory methods --json
doc mem_methods
run mem_short memory short-term "$ID" --json
doc mem_short
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d) == {"task", "repair_chain", "opt_history"} and "text" not in d, d' \
	"$H/mem_short.json" || fail "memory short-term: $(cat "$H/mem_short.json")"
run mem_export memory export "$H/kb" --json
doc mem_export
run mem_import memory import "$H/kb" --json
doc mem_import
grep -q '"changed":false' "$H/mem_import.json" || fail "memory import: $(cat "$H/mem_import.json")"
run mem_bad memory explain --json
err mem_bad 2

# eval: a mistyped folder, and the reference compiled alone (no GPU).
run eval_none eval "$H/nope" --json
err eval_none 3
run eval eval --json --compile-only --arch sm_90 "$KCLAW_SRC/examples/bias_gelu"
doc eval
grep -q '"status":"ok"' "$H/eval.json" || fail "eval: $(cat "$H/eval.json")"
grep -q '"timing":null' "$H/eval.json" || fail "eval: an unmeasured timing is not null"

cleanup
echo "json ok"
