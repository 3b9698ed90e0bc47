#!/bin/sh
# A task that failed says why in status (one task, the list, --json) and
# result: the job that failed and what it said, not only "a job failed
# after its retries", and the command that shows its events.
set -u
B="$KCLAW_BIN"
K="$B/kclaw"
T=$(mktemp -d /tmp/kc-why-XXXXXX)
cleanup() { kill "$ORCH" "$AGENT" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
fail() { echo "FAIL: $*" >&2; tail -5 "$T/kclawd.log" >&2; cleanup; exit 1; }

mkdir -p "$T/home"
echo '{"orchestrator": {"job_retries": 1}}' >"$T/home/kclaw.json"
export KCLAW_HOME="$T/home"
(cd "$T/home" && exec "$B/kclawd" --home "$T/home") >"$T/kclawd.log" 2>&1 &
ORCH=$!
# A generator whose every answer is a failure.
"$B/kc-double" --role generator --home "$T/home" --fail-every 1 >"$T/double.log" 2>&1 &
AGENT=$!
i=0
until "$K" status --json >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "kclawd never answered"; sleep 0.1
done
ID=$("$K" submit "$KCLAW_SRC/examples/sum_reduce") || fail submit
i=0
until "$K" status "$ID" | grep -q "state *FAILED"; do
	i=$((i + 1)); [ $i -gt 200 ] && fail "the task never failed"; sleep 0.1
done
WHY="generator job failed 2 times: scripted failure"

"$K" status "$ID" >"$T/one" || fail "status ID"
grep -q "why .*$WHY" "$T/one" || fail "status ID: $(cat "$T/one")"
grep -q "events *kclaw watch $ID --log --no-follow" "$T/one" || fail "no events command: $(cat "$T/one")"
"$K" status >"$T/list" || fail "status"
grep "^$ID" "$T/list" | grep -q "FAILED.*$WHY" || fail "the list drops the reason: $(cat "$T/list")"
"$K" status "$ID" --json | python3 -c '
import json, sys
e = json.load(sys.stdin)["error"]
assert "'"$WHY"'" in e and "see the task" not in e, e' || fail "status --json"
"$K" status --json | python3 -c '
import json, sys
t = [t for t in json.load(sys.stdin)["tasks"] if t["id"] == "'"$ID"'"][0]
assert "'"$WHY"'" in t["error"], t' || fail "status --json list"
"$K" result "$ID" >"$T/result"
grep -q "why: .*$WHY" "$T/result" || fail "result: $(cat "$T/result")"
grep -q "events: kclaw watch $ID --log --no-follow" "$T/result" || fail "result: no events command"
"$K" watch "$ID" --log --no-follow | grep -q "TASK_FINISHED" || fail "the events command shows no TASK_FINISHED"
cleanup
echo "why ok"
