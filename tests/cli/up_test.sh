#!/bin/sh
# `kclaw up` tells the truth at start-up: without a model or recordings it
# refuses (saying how to configure either, and --replay DIR) and starts
# nothing; with --replay, --detach says where the dashboard is, who answers
# the agents, and warns of what will not work here (no GPU, no model).
set -u
K="$KCLAW_BIN/kclaw"
H=$(mktemp -d /tmp/kc-cliup-XXXXXX)
REC="$KCLAW_SRC/examples/recordings"
unset KCLAW_LLM_MODEL KCLAW_LLM_BASE_URL KCLAW_LLM_REPLAY KCLAW_HTTP_URL \
	KCLAW_AGENT_BIN KCLAW_HOME
export KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1
cleanup() { "$K" --home "$H" up --stop >/dev/null 2>&1; rm -rf "$H"; }
fail() { echo "FAIL: $*" >&2; tail -n 5 "$H"/run/*.log >&2; cleanup; exit 1; }

"$K" --home "$H" up --detach >"$H/out" 2>"$H/err"
[ $? -eq 1 ] || fail "up without a model or recordings must exit 1"
grep -q "no LLM model configured and no recordings" "$H/err" || fail "why: $(cat "$H/err")"
grep -q "KCLAW_LLM_MODEL" "$H/err" && grep -q -- "--replay DIR" "$H/err" ||
	fail "how to configure either: $(cat "$H/err")"
[ ! -e "$H/run/up.pid" ] || fail "a refused up started a supervisor"
"$K" --home "$H" status >/dev/null 2>&1
[ $? -eq 4 ] || fail "a refused up left an orchestrator running"

"$K" --home "$H" up --detach --replay "$H/nope" >/dev/null 2>"$H/err"
[ $? -eq 3 ] || fail "--replay of a missing folder must exit 3"
grep -q -- "--replay $H/nope: no such folder" "$H/err" || fail "$(cat "$H/err")"
KCLAW_LLM_REPLAY="$H/nope" "$K" --home "$H" up --detach >/dev/null 2>"$H/err"
[ $? -eq 3 ] || fail "KCLAW_LLM_REPLAY of a missing folder must exit 3"
grep -q "recordings folder $H/nope" "$H/err" || fail "$(cat "$H/err")"

# Another agent program (KCLAW_AGENT_BIN) or no agents: nothing to check.
"$K" --home "$H" up --detach --agents 0 --gpus 1 >"$H/out" 2>"$H/err" ||
	fail "up --agents 0: $(cat "$H/err")"
grep -q "dashboard: off; KCLAW_HTTP_URL=" "$H/out" || fail "no dashboard line: $(cat "$H/out")"
"$K" --home "$H" up --stop >/dev/null || fail "stop"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
KCLAW_HTTP_URL="http://127.0.0.1:$port" "$K" --home "$H" up --detach --replay "$REC" \
	>"$H/out" 2>"$H/err" || fail "up --replay: $(cat "$H/err")"
grep -q "running in the background" "$H/out" || fail "$(cat "$H/out")"
grep -q "dashboard: http://127.0.0.1:$port/" "$H/out" || fail "no dashboard URL: $(cat "$H/out")"
grep -q "agents: answer from the recordings in $REC" "$H/out" ||
	fail "who answers: $(cat "$H/out")"
grep -q "warning: no GPU here (the NVIDIA driver library /nonexistent/libcuda.so.1" \
	"$H/out" || fail "no GPU warning: $(cat "$H/out")"
grep -q "warning: no LLM model configured" "$H/out" || fail "no model warning: $(cat "$H/out")"
python3 - "$port" <<'PY' || fail "the dashboard is not served where up said"
import sys, time, urllib.request
for _ in range(50):
    try:
        body = urllib.request.urlopen("http://127.0.0.1:%s/" % sys.argv[1], timeout=2).read()
        sys.exit(0 if b"<html" in body.lower() else 1)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
PY
# The agents started (they found a model-free way to answer).
i=0
until grep -q "serving" "$H"/run/agent-planner-0.log 2>/dev/null; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "the planner never served"; sleep 0.1
done
cleanup
echo "up ok"
