#!/bin/sh
# The dashboard, end to end, in headless Chromium (Playwright):
#  1. the real kclawd serving it (--http) and the standalone kclaw-monitor
#     on temporary addresses: a task submitted during the test appears, and
#     the page follows when it is cancelled, without a reload (its state and
#     stop reason), and its page opens at /task/ID;
#  2. a service with a finished task with real LLM usage (live_env.sh) and a
#     task that failed: at 1280 and 1920 px the task list shows every column
#     without scrolling sideways, the task pages show state, stop reason,
#     reference and best time, speedup, tokens, cost and the downloads, and
#     the plot its best and base lines, legend and seed labels
#     (dashboard_test.mjs "pages"); screenshots in $KCLAW_DASH_SHOTS
#     (default: dashboard-shots/ in the build folder).
# Exits 77 (skipped) where Chromium or playwright-core is not installed.
set -u
B="$KCLAW_BIN"
HERE="$KCLAW_SRC/tests/monitor"
[ -x /usr/bin/chromium ] || { echo "SKIP: no /usr/bin/chromium"; exit 77; }
[ -d "$HERE/node_modules/playwright-core" ] || { echo "SKIP: playwright-core not installed (tools/install-deps.sh)"; exit 77; }

H=$(mktemp -d /tmp/kc-dash-XXXXXX)
export KCLAW_HOME="$H"
PORT=$(python3 "$KCLAW_SRC/tests/free_port.py" 4)
H0="$H"
MON= ORCH=
. "$HERE/live_env.sh"
cleanup() {
	[ -z "$MON" ] || kill "$MON" 2>/dev/null
	[ -z "$ORCH" ] || kill "$ORCH" 2>/dev/null
	if [ -d "$H0/live/home" ]; then H="$H0/live"; live_stop; fi
	wait 2>/dev/null
	rm -rf "$H0"
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
node "$HERE/dashboard_test.mjs" follow "http://127.0.0.1:$PORT/" "$TASK" CANCELLED >"$FIFO" 2>&1 &
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
curl -sf "http://127.0.0.1:$PORT/api/tasks/$TASK" | grep -q '"state":"cancelled"' ||
	fail "/api/tasks/ID does not show CANCELLED"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/api/tasks/nosuchtask")
[ "$code" = 404 ] || fail "unknown task gives $code, not 404"
curl -sf "http://127.0.0.1:$((PORT + 1))/api/tasks/$TASK" | grep -q '"state":"cancelled"' ||
	fail "the standalone monitor does not show CANCELLED"
i=0
until curl -sf "http://127.0.0.1:$((PORT + 1))/metrics" | grep -q 'kclaw_tasks{state="CANCELLED"} 1'; do
	i=$((i + 1)); [ $i -gt 50 ] && fail "the standalone monitor's /metrics never counted the cancel"; sleep 0.1
done
kill "$MON" "$ORCH" 2>/dev/null
wait "$MON" "$ORCH" 2>/dev/null
MON= ORCH=

# 2. A finished task with usage, and one that fails (no scripted reply
# for its name: the Generator fails after its retries).
H="$H0/live"
mkdir -p "$H"
PORT=$((PORT + 2))
live_start || fail "the live task did not run"
cp -r "$KCLAW_SRC/examples/softmax_rows" "$H/unscripted"
python3 - "$H/unscripted/task.json" <<'PY' || fail "bundle copy"
import json, sys
t = json.load(open(sys.argv[1]))
t["name"] = "dash_unscripted"
json.dump(t, open(sys.argv[1], "w"))
PY
FAILED=$("$B/kclaw" --home "$H/home" submit "$H/unscripted") || fail "submit the failing task"
i=0
until "$B/kclaw" --home "$H/home" status "$FAILED" --json | grep -q '"state": *"[Ff][Aa][Ii][Ll][Ee][Dd]"'; do
	i=$((i + 1)); [ $i -gt 300 ] && fail "the unscripted task never failed"; sleep 0.1
done
SHOTS="${KCLAW_DASH_SHOTS:-$B/../dashboard-shots}"
mkdir -p "$SHOTS"
node "$HERE/dashboard_test.mjs" pages "http://127.0.0.1:$PORT/" "$TASK" "$FAILED" "$SHOTS" ||
	fail "the dashboard's pages (above)"
echo "screenshots: $(cd "$SHOTS" && pwd)"
echo "dashboard test ok"
cleanup
