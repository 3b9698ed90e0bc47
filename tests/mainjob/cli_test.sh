#!/bin/sh
# mainjob_cli: `kclaw main` and `kclaw report` where they must refuse or
# fail: no GPU (one sentence, exit 1), --no-gpu-ok (the service starts,
# shows its health with every process up, stops, exit 0), bad arguments
# (exit 2), an unknown example (exit 3), no service (exit 4), and a task
# that fails for want of a GPU (the real sandbox without a driver): FAILED
# in the report, success 0/1, kclaw main exits 1; and a configured model
# answering instead of the recordings.
set -eu
BIN=${KCLAW_BIN:?set KCLAW_BIN to the build bin folder}
SRC=${KCLAW_SRC:?set KCLAW_SRC to the source tree}
T=$(mktemp -d /tmp/kc-mainjob-cli.XXXXXX)
cleanup() {
	"$BIN/kclaw" --home "$T/keep" up --stop >/dev/null 2>&1 || true
	rm -rf "$T"
}
trap cleanup EXIT
unset KCLAW_LLM_MODEL KCLAW_LLM_REPLAY KCLAW_LLM_BASE_URL KCLAW_HOME \
	KCLAW_SANDBOX_BIN || true
export KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1
K="$BIN/kclaw"

fail() {
	echo "FAIL: $*"
	exit 1
}

# expect CODE CMD...: runs CMD, output in $T/out and $T/err.
expect() {
	want=$1
	shift
	rc=0
	"$@" >"$T/out" 2>"$T/err" || rc=$?
	[ "$rc" = "$want" ] || {
		cat "$T/out" "$T/err"
		fail "'$*' exited $rc, expected $want"
	}
}

# No GPU: one sentence on stderr, nothing else, exit 1, nothing started.
expect 1 "$K" --home "$T/nogpu" main
[ "$(wc -l <"$T/err")" = 1 ] || fail "no-GPU message is not one line"
grep -q "^kclaw main: no NVIDIA GPU on this machine (the NVIDIA driver library /nonexistent/libcuda.so.1 cannot be loaded)" "$T/err" ||
	fail "no-GPU message: $(cat "$T/err")"
[ ! -s "$T/out" ] || fail "no-GPU run printed to stdout"
[ ! -e "$T/nogpu" ] || fail "no-GPU run created a home"

# --no-gpu-ok: the service comes up whole (agents replaying: none
# restarted), is stopped again, and the sentence ends the output.
expect 0 "$K" --home "$T/ok" main --no-gpu-ok --examples "$SRC/examples"
for p in kclawd agent-generator-0 agent-feature-0 agent-planner-0 \
	agent-optimizer-0 agent-diagnoser-0 agent-repairer-0 sandbox-0; do
	grep -Eq "^  $p +pid [0-9]+ +running +restarts 0$" "$T/out" ||
		{ cat "$T/out"; fail "health lacks $p running"; }
done
grep -q "service stopped" "$T/out" || fail "service not stopped"
tail -n 1 "$T/out" | grep -q "^kclaw main: no NVIDIA GPU on this machine" ||
	fail "last line: $(tail -n 1 "$T/out")"
expect 3 "$K" --home "$T/ok" up --stop

# Usage errors and unknown examples.
expect 2 "$K" main --bogus
expect 2 "$K" main --rounds many
expect 2 "$K" report --bogus
expect 3 "$K" --home "$T/x" main --skip-gpu-check --examples "$SRC/examples" \
	no_such_task
grep -q "no example 'no_such_task'" "$T/err" || fail "$(cat "$T/err")"
expect 3 "$K" --home "$T/x" main --skip-gpu-check --examples "$T/none"
expect 3 "$K" --home "$T/x" main --skip-gpu-check --examples "$SRC/examples" \
	--recordings "$T/none"
grep -q "no recordings at" "$T/err" || fail "$(cat "$T/err")"

# A broken bundle is refused before anything starts.
mkdir -p "$T/ex/bad" "$T/rec"
echo '{"name": "bad"}' >"$T/ex/bad/task.json"
expect 1 "$K" --home "$T/bad" main --skip-gpu-check --examples "$T/ex" \
	--recordings "$T/rec"
grep -q "example bad: .*task.json" "$T/err" || fail "$(cat "$T/err")"
[ ! -e "$T/bad/run/up.pid" ] && [ ! -e "$T/bad/run/up.log" ] ||
	fail "a service started for a broken bundle"

# No service: report says how to start one.
expect 4 "$K" --home "$T/nothing" report
grep -q "kclaw up" "$T/err" || fail "$(cat "$T/err")"

# The real sandbox without a driver: the task fails saying so, main exits 1
# and its report shows it.
expect 1 "$K" --home "$T/keep" main --skip-gpu-check --keep \
	--examples "$SRC/examples" softmax_rows
grep -Eq "^softmax_rows +[0-9a-f]+ +FAILED +- +- +- +- +0 +0 +0$" "$T/out" ||
	{ cat "$T/out"; fail "FAILED row"; }
grep -q "1 task(s): success 0/1 (0%), fast_1 0/1 (0%)$" "$T/out" ||
	fail "summary of a failed set"
grep -q "softmax_rows: .*no GPU" "$T/out" || fail "failure reason"
expect 0 "$K" --home "$T/keep" report --json
python3 - "$T/out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["tasks"][0]
assert t["state"] == "failed" and t["speedup"] is None, t
assert "no GPU" in t["error"], t
s = r["set"]
assert s["tasks"] == 1 and s["success"] == 0 and s["fast_1"] == 0, s
assert s["mean_speedup"] is None and s["geomean_speedup"] is None, s
PY
expect 3 "$K" --home "$T/keep" report 0123456789abcdef
grep -q "no task '0123456789abcdef'" "$T/err" || fail "$(cat "$T/err")"
expect 0 "$K" --home "$T/keep" up --stop

# A configured model wins over the recordings: every bundle, the agents ask
# the model (here nothing listens), the task fails saying why.
expect 1 env KCLAW_LLM_MODEL=m KCLAW_LLM_BASE_URL=http://127.0.0.1:9/v1 \
	KCLAW_LLM_MAX_TRIES=1 "$K" --home "$T/llm" main --skip-gpu-check \
	--examples "$SRC/examples" sum_reduce
grep -q "agents answer from model m at http://127.0.0.1:9/v1" "$T/out" ||
	fail "model mode: $(head -n 3 "$T/out")"
grep -q "LLM call to http://127.0.0.1:9/v1/chat/completions (model m) failed" \
	"$T/out" || fail "model mode: no LLM failure in the progress"
grep -Eq "^sum_reduce +[0-9a-f]+ +FAILED " "$T/out" || fail "model mode row"
echo "mainjob_cli: ok"
