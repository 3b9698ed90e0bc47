#!/bin/sh
# /metrics and the dashboard's API on a task with real LLM usage, without a
# browser (live_env.sh: the real kclawd, agents calling the provider
# emulator, the real sandbox with a scripted child):
#  - promcheck.py, a strict parser of the Prometheus text format, refuses
#    what the old /metrics did (interleaved families, a _sum counter, _ms)
#    and other breaches, and accepts what kclawd and kclaw-monitor serve;
#  - kclaw_tokens_total{role,kind} equal the task record's usage per role
#    (prompt, completion, reasoning, cached), kclaw_cost_usd_total{role}
#    its cost at kclaw.json's prices, on both;
#  - the API's task records carry cost_usd, the task list the stop reason;
#  - the best kernel downloads as kernel.cu, plan.json and kernel.tar,
#    identical to what Result returns; /task/ID serves the page.
set -u
B="$KCLAW_BIN"
HERE="$KCLAW_SRC/tests/monitor"
. "$HERE/live_env.sh"
H=$(mktemp -d /tmp/kc-metrics-XXXXXX)
PORT=$(python3 "$KCLAW_SRC/tests/free_port.py" 4)
MON=
cleanup() {
	[ -z "$MON" ] || kill "$MON" 2>/dev/null
	live_stop
	wait 2>/dev/null
	rm -rf "$H"
}
fail() { echo "FAIL: $*" >&2; cleanup; exit 1; }
P="python3 $HERE/promcheck.py"

# The parser is strict: each of these is refused.
bad() {
	printf '%s\n' "$2" >"$H/bad.txt"
	$P "$H/bad.txt" >"$H/bad.out" 2>&1 && fail "promcheck accepted $1"
	grep -q "$3" "$H/bad.out" || fail "promcheck on $1: $(cat "$H/bad.out")"
}
bad "interleaved families" '# HELP a_total A.
# TYPE a_total counter
# HELP b_total B.
# TYPE b_total counter
a_total{x="1"} 1
b_total{x="1"} 1
a_total{x="2"} 1' "families interleaved"
bad "a _sum counter" '# HELP lat_seconds_sum L.
# TYPE lat_seconds_sum counter
lat_seconds_sum 3' "must end in _total"
bad "milliseconds" '# HELP lat_ms L.
# TYPE lat_ms gauge
lat_ms 3' "seconds"
bad "a duplicate series" '# HELP g G.
# TYPE g gauge
g{a="1",b="2"} 1
g{b="2",a="1"} 2' "duplicate series"
bad "a sample before its TYPE" 'g 1
# HELP g G.
# TYPE g gauge' "no TYPE before"
bad "buckets that are not cumulative" '# HELP h_seconds H.
# TYPE h_seconds histogram
h_seconds_bucket{le="1"} 3
h_seconds_bucket{le="2"} 2
h_seconds_bucket{le="+Inf"} 3
h_seconds_sum 1
h_seconds_count 3' "not cumulative"
bad "a gauge named _total" '# HELP x_total X.
# TYPE x_total gauge
x_total 1' "a gauge named _total"
bad "a bad label escape" '# HELP g G.
# TYPE g gauge
g{a="\q"} 1' "bad escape"

live_start || fail "the live task did not run"
A="http://127.0.0.1:$PORT"
"$B/kclaw-monitor" --home "$H/home" --http "http://127.0.0.1:$((PORT + 1))" \
	>"$H/monitor.log" 2>&1 &
MON=$!

curl -sf "$A/api/tasks/$TASK" >"$H/status.json" || fail "Status over HTTP"
curl -sf "$A/api/tasks" >"$H/list.json" || fail "List over HTTP"
curl -sf "$A/api/result/$TASK" >"$H/result.json" || fail "Result over HTTP"
# The expected series from the record: tokens per role and kind, cost.
python3 - "$H" >"$H/expect.txt" <<'PY' || fail "expectations: $(cat "$H/expect.txt")"
import json, sys
h = sys.argv[1]
st = json.load(open(f"{h}/status.json"))["task"]
price = {"prompt": 2, "completion": 8, "cached_prompt": 0.5, "reasoning": 6}
total, exprs = 0.0, []
assert st["state"] in ("DONE", "done"), st["state"]
assert len(st["usage"]) == 6, st["usage"]
for u in st["usage"]:
    role = u["role"].lower()
    p, c = u["prompt_tokens"], u["completion_tokens"]
    r, k = u["reasoning_tokens"], u["cached_tokens"]
    for kind, v in (("prompt", p), ("completion", c), ("reasoning", r), ("cached", k)):
        exprs.append(f'kclaw_tokens_total{{role="{role}",kind="{kind}"}}=={v}')
    usd = ((p - k) * price["prompt"] + k * price["cached_prompt"] +
           (c - r) * price["completion"] + r * price["reasoning"]) / 1e6
    exprs.append(f'kclaw_cost_usd_total{{role="{role}"}}=={usd:.6f}')
    assert abs(u["cost_usd"] - usd) < 1e-9, (u, usd)
    total += usd
assert sum(u["reasoning_tokens"] for u in st["usage"]) > 0, "no reasoning tokens"
assert sum(u["cached_tokens"] for u in st["usage"]) > 0, "no cached tokens"
assert abs(st["cost_usd"] - total) < 1e-9, (st["cost_usd"], total)
lst = json.load(open(f"{h}/list.json"))["tasks"]
t = [x for x in lst if x["id"] == st["id"]][0]
assert abs(t["cost_usd"] - total) < 1e-9, t.get("cost_usd")
assert t["error"] == "stopped: round budget spent", "the list's stop reason: %r" % t["error"]
assert t["max_rounds"] == 4, t["max_rounds"]
res = json.load(open(f"{h}/result.json"))
assert abs(res["task"]["cost_usd"] - total) < 1e-9
print("\n".join(exprs))
PY
exprs=$(cat "$H/expect.txt")
# Series every scrape has, whatever happened.
always='kclaw_tasks{state="DONE"}==1 kclaw_rounds_total==4
kclaw_evaluation_duration_seconds_count>0
kclaw_agent_llm_duration_seconds_count{role="planner"}>0
kclaw_llm_calls_total{role="planner"}>0 kclaw_llm_failed_calls_total{role="planner"}==0
kclaw_events_total{kind="task_finished"}==1'
curl -sf "$A/metrics" >"$H/kclawd.prom" || fail "kclawd's /metrics"
# shellcheck disable=SC2086
$P "$H/kclawd.prom" $always $exprs || fail "kclawd's /metrics (above)"
i=0
until curl -sf "http://127.0.0.1:$((PORT + 1))/metrics" >"$H/monitor.prom" &&
	grep -q 'kclaw_tasks{state="DONE"} 1' "$H/monitor.prom"; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "kclaw-monitor's /metrics never counted the task"; sleep 0.1
done
# shellcheck disable=SC2086
$P "$H/monitor.prom" $always $exprs || fail "kclaw-monitor's /metrics (above)"

# Downloads: the best kernel as Result has it (tuned where tuned).
curl -sf -D "$H/hdr" -o "$H/kernel.cu" "$A/api/result/$TASK/kernel.cu" || fail "kernel.cu"
grep -qi "^Content-Disposition: attachment; filename=\"kclaw-$TASK-kernel.cu\"" "$H/hdr" ||
	fail "kernel.cu is not an attachment: $(cat "$H/hdr")"
curl -sf -o "$H/plan.json" "$A/api/result/$TASK/plan.json" || fail "plan.json"
curl -sf -o "$H/kernel.tar" "$A/api/result/$TASK/kernel.tar" || fail "kernel.tar"
"$B/kclaw" --home "$H/home" result "$TASK" --out "$H/out" >/dev/null || fail "kclaw result --out"
python3 - "$H" "$TASK" <<'PY' || fail "downloads differ from Result"
import json, os, sys, tarfile
h, task = sys.argv[1], sys.argv[2]
b = json.load(open(f"{h}/result.json"))["best"]
src, plan = b["candidate"]["source"], b["candidate"]["plan_json"]
ev = b.get("eval") or {}
if ev.get("tuned_source") and ev.get("tuned_plan"):
    src, plan = ev["tuned_source"], ev["tuned_plan"]
assert "__global__" in src
assert open(f"{h}/kernel.cu").read() == src
assert open(f"{h}/plan.json").read() == plan
json.loads(plan)
# kernel.tar: what `kclaw result --out` writes, file for file.
out = f"{h}/out"
files = sorted(os.listdir(out))
assert "model_new.py" in files and "launcher.c" in files, files
with tarfile.open(f"{h}/kernel.tar") as t:
    names = t.getnames()
    assert sorted(names) == [f"kclaw-{task}/{f}" for f in files], (names, files)
    for f in files:
        assert t.extractfile(f"kclaw-{task}/{f}").read() == open(f"{out}/{f}", "rb").read(), f
PY
code=$(curl -s -o "$H/err.json" -w '%{http_code}' "$A/api/result/$TASK/nosuch.txt")
[ "$code" = 404 ] && grep -q '"code":"not_found"' "$H/err.json" ||
	fail "an unknown download gives $code: $(cat "$H/err.json")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$A/api/result/nosuchtask/kernel.cu")
[ "$code" = 404 ] || fail "an unknown task's download gives $code"
# The task's page is the dashboard's.
curl -sf "$A/task/$TASK" | grep -q "<title>kclaw</title>" || fail "/task/ID does not serve the page"
echo "metrics test ok"
cleanup
