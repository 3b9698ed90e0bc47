#!/bin/sh
# A process that crash-loops is named, with why it dies: kclaw's real agent
# without a model (started under another name, so that `kclaw up` does not
# refuse it) exits at once with "no LLM model configured" in its log;
# `up --detach` warns of it, and `kclaw status` (table and --json) shows it
# crash-looping with that last error line and where its log is.
set -u
K="$KCLAW_BIN/kclaw"
H=$(mktemp -d /tmp/kc-loop-XXXXXX)
unset KCLAW_LLM_MODEL KCLAW_LLM_BASE_URL KCLAW_LLM_REPLAY KCLAW_HTTP_URL KCLAW_HOME
export KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1
export KCLAW_SANDBOX_BIN="$KCLAW_BIN/kc-double"
mkdir -p "$H/bin"
ln -s "$KCLAW_BIN/kclaw-agent" "$H/bin/my-agent"
export KCLAW_AGENT_BIN="$H/bin/my-agent"
cleanup() { "$K" --home "$H" up --stop >/dev/null 2>&1; rm -rf "$H"; }
fail() { echo "FAIL: $*" >&2; tail -n 5 "$H"/run/*.log >&2; cleanup; exit 1; }
WHY="no LLM model configured"

"$K" --home "$H" up --detach --agents 0 --role-agents planner=1 --gpus 1 \
	>"$H/up.out" 2>"$H/up.err" || fail "up --detach: $(cat "$H/up.err")"
grep -q "warning: agent-planner-0 .*restarted [0-9]* times.*$WHY" "$H/up.out" ||
	fail "up --detach does not warn of the dying agent: $(cat "$H/up.out")"
grep -q "its log: $H/run/agent-planner-0.log" "$H/up.out" ||
	fail "up --detach does not say where the log is: $(cat "$H/up.out")"

# Three short lives in a row (backoff 200, 400, 800 ms): crash-looping.
i=0
until "$K" --home "$H" status >"$H/status" 2>&1 &&
	grep -q "^agent-planner-0 .* crash-looping " "$H/status"; do
	i=$((i + 1)); [ $i -gt 150 ] && fail "never crash-looping: $(cat "$H/status")"; sleep 0.1
done
grep "^agent-planner-0 " "$H/status" | grep -q "$WHY" ||
	fail "status shows no last error: $(cat "$H/status")"
grep -q "^warning: agent-planner-0 is crash-looping (restarted [0-9]* times): .*$WHY.*; its log: $H/run/agent-planner-0.log$" \
	"$H/status" || fail "status has no warning line: $(cat "$H/status")"
grep "^kclawd " "$H/status" | grep -q "running" || fail "kclawd: $(cat "$H/status")"
"$K" --home "$H" status --json | python3 -c '
import json, sys
ps = {p["name"]: p for p in json.load(sys.stdin)["health"]["processes"]}
p = ps["agent-planner-0"]
assert p["state"] == "crash-looping" and p["restarts"] >= 2, p
assert "'"$WHY"'" in p["last_error"] and " error: " not in p["last_error"], p
assert ps["kclawd"]["state"] == "running" and ps["kclawd"]["last_error"] is None, ps' ||
	fail "status --json: $("$K" --home "$H" status --json)"
# The event log says why each time too.
"$K" --home "$H" watch --no-follow --log | grep "PROCESS_CRASHED" | grep -q "last error: .*$WHY" ||
	fail "PROCESS_CRASHED events without the last error"
cleanup
echo "crash loop ok"
