#!/bin/sh
# The supervisor's watchdog: a kclawd stopped with SIGSTOP under `kclaw up`
# answers no Health; after 3 misses (300 ms apart here) it is killed and
# restarted, and the PROCESS_RESTARTED event says why.
set -u
K="$KCLAW_BIN/kclaw"
H=$(mktemp -d /tmp/kc-wdog-XXXXXX)
OLD=
unset KCLAW_LLM_MODEL KCLAW_LLM_BASE_URL KCLAW_LLM_REPLAY KCLAW_HTTP_URL KCLAW_HOME
export KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1
export KCLAW_SANDBOX_BIN="$KCLAW_BIN/kc-double"
export KCLAW_UP_HEALTH_MS=300 KCLAW_UP_HEALTH_MISSES=3
cleanup() {
	[ -n "$OLD" ] && kill -CONT "$OLD" 2>/dev/null
	"$K" --home "$H" up --stop >/dev/null 2>&1; rm -rf "$H"
}
fail() { echo "FAIL: $*" >&2; tail -n 5 "$H"/run/*.log >&2; cleanup; exit 1; }
kclawd_pid() {
	"$K" --home "$H" status --json 2>/dev/null | python3 -c '
import json, sys
ps = {p["name"]: p for p in json.load(sys.stdin)["health"]["processes"]}
print(ps["kclawd"]["pid"] if ps["kclawd"]["state"] == "running" else "")' 2>/dev/null
}

"$K" --home "$H" up --detach --agents 0 --gpus 1 >"$H/up.out" 2>"$H/up.err" ||
	fail "up --detach: $(cat "$H/up.err")"
i=0
until OLD=$(kclawd_pid) && [ -n "$OLD" ]; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "no kclawd pid"; sleep 0.1
done
# A healthy kclawd is left alone.
sleep 1.5
[ "$(kclawd_pid)" = "$OLD" ] || fail "a healthy kclawd was restarted"
kill -STOP "$OLD" || fail "SIGSTOP"
i=0
until NEW=$(kclawd_pid) && [ -n "$NEW" ] && [ "$NEW" != "$OLD" ]; do
	i=$((i + 1)); [ $i -gt 150 ] && fail "the stopped kclawd was never restarted"; sleep 0.1
done
kill -0 "$OLD" 2>/dev/null && fail "the stopped kclawd $OLD still exists"
OLD=
WHY="kclawd did not answer Health for 0.9 s"
i=0
until "$K" --home "$H" watch --no-follow --log >"$H/log" 2>&1 &&
	grep "PROCESS_RESTARTED" "$H/log" | grep -q "kclawd restarted (pid $NEW, restart 1): $WHY"; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "no PROCESS_RESTARTED saying why: $(grep PROCESS_ "$H/log")"; sleep 0.1
done
grep "PROCESS_CRASHED" "$H/log" | grep -q "kclawd (pid [0-9]*) killed: $WHY" ||
	fail "no PROCESS_CRASHED saying why: $(grep PROCESS_ "$H/log")"
grep -q "$WHY" "$H/run/up.log" || fail "up.log does not say why"
cleanup
echo "watchdog ok"
