#!/bin/sh
# `kclaw up` the way a user runs it: detached, with test-double agents and
# sandboxes; status (human and --json), a task through submit/watch/result,
# a killed agent and a killed kclawd restarted with PROCESS_RESTARTED
# events, the refusals, and a clean stop.
set -u
K="$KCLAW_BIN/kclaw"
H=$(mktemp -d /tmp/kc-up-XXXXXX)
export KCLAW_AGENT_BIN="$KCLAW_BIN/kc-double"
export KCLAW_SANDBOX_BIN="$KCLAW_BIN/kc-double"
fail() {
	echo "FAIL: $*" >&2
	tail -n 20 "$H"/run/*.log >&2
	"$K" --home "$H" up --stop >/dev/null 2>&1
	rm -rf "$H"
	exit 1
}
# The process table of `status --json` as "name pid state restarts" lines.
procs() {
	"$K" --home "$H" status --json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["health"].get("processes", []):
    print(p["name"], p.get("pid", 0), p["state"], p.get("restarts", 0))'
}
pid_of() { procs | awk -v n="$1" '$1 == n { print $2 }'; }

"$K" --home "$H" status >/dev/null 2>&1
[ $? -eq 4 ] || fail "status without a deployment must exit 4"
"$K" --home "$H" up --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown option must exit 2"
"$K" --home "$H" up --role-agents planner=x >/dev/null 2>&1
[ $? -eq 2 ] || fail "a bad --role-agents must exit 2"
"$K" --home "$H" up --stop >/dev/null 2>&1
[ $? -eq 3 ] || fail "up --stop without a deployment must exit 3"

"$K" --home "$H" up --detach --gpus 2 --role-agents planner=2 >/dev/null ||
	fail "up --detach"
"$K" --home "$H" up --detach >/dev/null 2>&1
[ $? -eq 1 ] || fail "a second up must be refused"

# kclawd, 7 agents (two planners), 2 sandboxes.
n=0
for i in $(seq 100); do
	n=$(procs | awk '$3 == "running"' | wc -l)
	[ "$n" -eq 10 ] && break
	sleep 0.1
done
[ "$n" -eq 10 ] || fail "expected 10 running processes, got $n"
"$K" --home "$H" status | grep -q "agent-planner-1" ||
	fail "status does not show the processes"

# A task through the CLI: a bundle whose context scripts the doubles.
B="$H/bundle"
mkdir -p "$B"
cat >"$B/task.json" <<'JSON'
{"name": "up_copy", "tensors": [
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
id=$("$K" --home "$H" submit "$B") || fail "submit"
"$K" --home "$H" watch "$id" >"$H/watch.txt" || fail "watch"
grep -q "TASK_FINISHED" "$H/watch.txt" || fail "watch did not end with the task"
"$K" --home "$H" result "$id" | grep -q "KC:ok:0.5" || fail "result"
"$K" --home "$H" result "$id" --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["task"]["state"] == "done", r["task"]
assert len(r["history"]) == 5, len(r["history"])' || fail "result --json"
"$K" --home "$H" result "$id" --out "$H/best" >/dev/null || fail "result --out"
grep -q "KC:ok:0.5" "$H/best/kernel.cu" && [ -s "$H/best/plan.json" ] ||
	fail "result --out did not write the best kernel"
"$K" --home "$H" submit "$H/nonexistent" >/dev/null 2>&1
[ $? -ne 0 ] || fail "submitting a missing bundle must fail"
"$K" --home "$H" cancel "$id" >/dev/null 2>&1
[ $? -eq 1 ] || fail "cancelling a DONE task must exit 1"
"$K" --home "$H" status nosuchtask >/dev/null 2>&1
[ $? -eq 3 ] || fail "status of an unknown task must exit 3"

# A killed agent is restarted, and the event log says so.
old=$(pid_of agent-planner-1)
kill -9 "$old"
for i in $(seq 100); do
	new=$(pid_of agent-planner-1)
	[ -n "$new" ] && [ "$new" != 0 ] && [ "$new" != "$old" ] && break
	sleep 0.1
done
[ "$new" != "$old" ] || fail "agent-planner-1 was not restarted"
procs | grep -q "^agent-planner-1 $new running 1$" || fail "restart count"
"$K" --home "$H" watch --no-follow --json | grep -q '"process_restarted"' ||
	fail "no PROCESS_RESTARTED event"

# So is a killed orchestrator; the task survives it.
old=$(pid_of kclawd)
kill -9 "$old"
sleep 0.5
for i in $(seq 100); do
	new=$(pid_of kclawd 2>/dev/null)
	[ -n "$new" ] && [ "$new" != "$old" ] && break
	sleep 0.1
done
[ -n "$new" ] && [ "$new" != "$old" ] || fail "kclawd was not restarted"
"$K" --home "$H" status "$id" | grep -q DONE || fail "task lost"

pids=$(procs | awk '{ print $2 }')
"$K" --home "$H" up --stop >/dev/null || fail "up --stop"
for p in $pids; do
	kill -0 "$p" 2>/dev/null && fail "process $p survived up --stop"
done
rm -rf "$H"
echo "up ok"
