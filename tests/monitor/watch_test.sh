#!/bin/sh
# kclaw watch as a user and a program use it, against the real kclawd:
#  - on a terminal (script(1) gives it one) the live view shows the task
#    with its state, round bar and process health, and redraws when the
#    task is cancelled;
#  - --json streams events as JSON lines, starting from the event log.
set -u
B="$KCLAW_BIN"
H=$(mktemp -d /tmp/kc-watch-XXXXXX)
export KCLAW_HOME="$H"
ORCH=
cleanup() { kill "$ORCH" 2>/dev/null; wait 2>/dev/null; rm -rf "$H"; }
fail() { echo "FAIL: $*" >&2; cat "$H/view.txt" >&2 2>/dev/null; cleanup; exit 1; }
command -v script >/dev/null || { echo "SKIP: no script(1)"; exit 77; }

# The orchestrator's default round budget (kclaw.json) differs from the
# examples' 15: a task whose spec sets none is drawn against 4, one that
# sets 7 against 7.
printf '{"orchestrator": {"rounds": 4}}\n' >"$H/kclaw.json"
cp -r "$KCLAW_SRC/examples/sum_reduce" "$H/nobudget"
cp -r "$KCLAW_SRC/examples/sum_reduce" "$H/seven"
python3 - "$H" <<'PY' || fail "bundle copies"
import json, sys
for d, name, budget in (("nobudget", "sum_nobudget", None), ("seven", "sum_seven", 7)):
    p = f"{sys.argv[1]}/{d}/task.json"
    t = json.load(open(p))
    t["name"] = name
    t.pop("budget", None)
    if budget:
        t["budget"] = {"rounds": budget}
    json.dump(t, open(p, "w"))
PY
"$B/kclawd" --home "$H" >"$H/kclawd.log" 2>&1 &
ORCH=$!
i=0
until "$B/kclaw" status --json >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "kclawd never answered"; sleep 0.1
done
TASK=$("$B/kclaw" submit "$KCLAW_SRC/examples/sum_reduce" --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["task_id"])') || fail submit

for d in nobudget seven; do
	"$B/kclaw" submit "$H/$d" >/dev/null || fail "submit $d"
done

# The live view on a pseudo-terminal 160 columns wide (NAME is shown from
# 130), for 3 s; the task is cancelled
# after 1.5 s and the view must show both states.
(sleep 1.5; "$B/kclaw" cancel "$TASK" >/dev/null) &
timeout 3 script -qfc "stty cols 160; $B/kclaw watch --home $H" /dev/null >"$H/view.txt" 2>&1
grep -q "kclaw watch" "$H/view.txt" || fail "no view header"
grep -q "sum_reduce" "$H/view.txt" || fail "the task's name is not shown"
grep -q "SEEDING" "$H/view.txt" || fail "the task's running state is not shown"
grep -q "CANCELLED" "$H/view.txt" || fail "the view did not follow the cancel"
grep -q '\[----------\] 0/' "$H/view.txt" || fail "no round bar"
# Each task's bar against its own budget, not a fixed 15.
grep -a 'sum_reduce' "$H/view.txt" | grep -q ' 0/15 ' || fail "sum_reduce's bar is not against its 15 rounds"
grep -a 'sum_nobudget' "$H/view.txt" | grep -q ' 0/4 ' || fail "a task without a budget is not drawn against kclaw.json's 4 rounds"
grep -a 'sum_seven' "$H/view.txt" | grep -q ' 0/7 ' || fail "sum_seven's bar is not against its 7 rounds"

# --json: the log from the start, as JSON lines a program reads.
"$B/kclaw" watch "$TASK" --json --no-follow >"$H/events.jsonl" || fail "watch --json"
python3 - "$H/events.jsonl" "$TASK" <<'PY' || fail "--json output"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
kinds = [e["kind"] for e in evs]
assert kinds[0] == "task_submitted", kinds
assert "task_cancelled" in kinds, kinds
assert all(e["task_id"] == sys.argv[2] for e in evs)
seqs = [e["seq"] for e in evs]
assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
PY
# With no event stream reaching it (its events address leads nowhere, as
# for a watcher on a host where events are not served, or a SUB socket
# still connecting when the task's last event goes out), watch still
# follows the task through the log and ends with it.
cp -r "$KCLAW_SRC/examples/sum_reduce" "$H/quiet"
python3 - "$H/quiet/task.json" <<'PY' || fail "bundle copy"
import json, sys
t = json.load(open(sys.argv[1])); t["name"] = "sum_quiet"; json.dump(t, open(sys.argv[1], "w"))
PY
QUIET=$("$B/kclaw" submit "$H/quiet" --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["task_id"])') || fail "submit quiet"
(sleep 1.5; "$B/kclaw" cancel "$QUIET" >/dev/null) &
KCLAW_EVENTS_URL="ipc://$H/nowhere.ipc" timeout 10 "$B/kclaw" watch "$QUIET" --json \
	>"$H/quiet.jsonl" || fail "watch without the event stream did not end with its task"
grep -q '"task_cancelled"' "$H/quiet.jsonl" || fail "watch without the event stream missed the cancel"
echo "watch test ok"
cleanup
