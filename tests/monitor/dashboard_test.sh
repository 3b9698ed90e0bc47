#!/bin/sh
# The dashboard, end to end: the real kclawd serving it (--http), and the
# standalone kclaw-monitor, on temporary
# addresses, headless Chromium (Playwright) loading the page; a task
# submitted during the test appears, and the page follows when it changes
# (cancelled) without a reload. Also checks /metrics and the JSON API.
# Exits 77 (skipped) where Chromium or playwright-core is not installed.
set -u
B="$KCLAW_BIN"
HERE="$KCLAW_SRC/tests/monitor"
[ -x /usr/bin/chromium ] || { echo "SKIP: no /usr/bin/chromium"; exit 77; }
[ -d "$HERE/node_modules/playwright-core" ] || { echo "SKIP: playwright-core not installed (tools/install-deps.sh)"; exit 77; }

H=$(mktemp -d /tmp/kc-dash-XXXXXX)
export KCLAW_HOME="$H"
PORT=$((20000 + $$ % 20000))
cleanup() {
	kill "$MON" "$ORCH" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$H"
}
fail() { echo "FAIL: $*" >&2; tail -20 "$H/kclawd.log" "$H/monitor.log" >&2; cleanup; exit 1; }

# The orchestrator serves the dashboard itself (--http).
"$B/kclawd" --home "$H" --http "http://127.0.0.1:$PORT" >"$H/kclawd.log" 2>&1 &
ORCH=$!
# A standalone monitor (for fleets) on a second port must agree.
"$B/kclaw-monitor" --home "$H" --http "http://127.0.0.1:$((PORT + 1))" >"$H/monitor.log" 2>&1 &
MON=$!
i=0
until curl -sf "http://127.0.0.1:$PORT/api/health" >/dev/null; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "monitor never answered"; sleep 0.1
done

TASK=$("$B/kclaw" submit "$KCLAW_SRC/examples/softmax_rows" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["task_id"])') ||
	fail "submit"
[ -n "$TASK" ] || fail "no task id"

# The browser waits for the row, then for CANCELLED, which we cause once it
# says it saw the row.
FIFO="$H/out"
mkfifo "$FIFO"
SCREENSHOT="${KCLAW_DASH_SCREENSHOT:-$H/dash.png}" node "$HERE/dashboard_test.mjs" "http://127.0.0.1:$PORT/" "$TASK" CANCELLED >"$FIFO" 2>&1 &
NODE=$!
saw_row=0
while IFS= read -r line; do
	echo "browser: $line"
	case "$line" in
	row-seen)
		saw_row=1
		"$B/kclaw" cancel "$TASK" >/dev/null || fail "cancel"
		;;
	esac
done <"$FIFO"
wait $NODE || fail "browser test failed"
[ $saw_row -eq 1 ] || fail "the task never showed"

curl -sf "http://127.0.0.1:$PORT/metrics" | grep -q 'kclaw_tasks{state="CANCELLED"} 1' ||
	fail "/metrics does not count the cancelled task"
curl -sf "http://127.0.0.1:$PORT/api/tasks/$TASK" | grep -q '"state":"CANCELLED"' ||
	fail "/api/tasks/ID does not show CANCELLED"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/api/tasks/nosuchtask")
[ "$code" = 404 ] || fail "unknown task gives $code, not 404"
curl -sf "http://127.0.0.1:$((PORT + 1))/api/tasks/$TASK" | grep -q '"state":"CANCELLED"' ||
	fail "the standalone monitor does not show CANCELLED"
i=0
until curl -sf "http://127.0.0.1:$((PORT + 1))/metrics" | grep -q 'kclaw_tasks{state="CANCELLED"} 1'; do
	i=$((i + 1)); [ $i -gt 50 ] && fail "the standalone monitor's /metrics never counted the cancel"; sleep 0.1
done
echo "dashboard test ok"
cleanup
