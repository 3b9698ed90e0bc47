#!/bin/sh
# A job whose model calls fail shows the error while it is retried: the
# real kclawd and kclaw-agent (generator) against the LLM emulator
# answering 529. status (text and --json) prints the agent's error, and
# watch's event log shows the AGENT_RETRYING event, before the retries
# are spent.
set -u
B="$KCLAW_BIN"
K="$B/kclaw"
T=$(mktemp -d /tmp/kc-retry-XXXXXX)
ORCH= AGENT= LLM=
cleanup() { kill $ORCH $AGENT $LLM 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
fail() { echo "FAIL: $*" >&2; tail -5 "$T/kclawd.log" "$T/agent.log" >&2; cleanup; exit 1; }

. "$KCLAW_SRC/tests/agents/emu.sh"
emu_start "$KCLAW_SRC" "$T" || fail "the emulator never started"
LLM=$EMU URL=$EMU_URL
# Every model call is overloaded; the agent waits 30 s before its next
# try, so the test sees the error while the job is retried.
A='{"status": 529, "error": "Overloaded", "headers": {"Retry-After": "30"}}'
printf '{"actions": [%s, %s, %s, %s, %s, %s]}' "$A" "$A" "$A" "$A" "$A" "$A" |
	curl -sf -X POST --data-binary @- "$URL/_script" >/dev/null || fail "scripting the emulator"

mkdir -p "$T/home"
export KCLAW_HOME="$T/home"
export KCLAW_LLM_BASE_URL="$URL/v1" KCLAW_LLM_MODEL=test-model KCLAW_LLM_API_KEY=kc-test-key-123
(cd "$T/home" && exec "$B/kclawd" --home "$T/home") >"$T/kclawd.log" 2>&1 &
ORCH=$!
"$B/kclaw-agent" --role generator --home "$T/home" >"$T/agent.log" 2>&1 &
AGENT=$!
i=0
until "$K" status --json >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "kclawd never answered"; sleep 0.1
done
ID=$("$K" submit "$KCLAW_SRC/examples/sum_reduce") || fail submit
i=0
until "$K" status "$ID" | grep -q "^  agent "; do
	i=$((i + 1)); [ $i -gt 200 ] && fail "status never showed the agent's error: $("$K" status "$ID")"; sleep 0.1
done
"$K" status "$ID" >"$T/one" || fail "status ID"
grep -q "^  agent      generator: model call try 1 of .* failed: HTTP 529 (Overloaded).*retrying in 30.0 s.* s ago)" "$T/one" ||
	fail "status ID: $(cat "$T/one")"
grep -q "kc-test-key-123" "$T/one" && fail "status shows the key"
"$K" status "$ID" --json | python3 -c '
import json, sys
t = json.load(sys.stdin)
e = t["last_agent_error"]
assert "HTTP 529" in e and "generator" in e, t
assert int(t["last_agent_error_unix_ms"]) > 0, t' || fail "status --json"
"$K" watch "$ID" --log --no-follow >"$T/log" || fail "watch --log"
grep "AGENT_RETRYING" "$T/log" | grep -q "HTTP 529" || fail "watch: no AGENT_RETRYING: $(cat "$T/log")"
cleanup
echo "retrying ok"
