#!/bin/sh
# mainjob_replay: `kclaw main` on the six shipped examples without a GPU and
# without an LLM: the real kclawd, kclaw-agent workers replaying
# examples/recordings, and the real kclaw-sandbox whose child answers from a
# table of the H200 timings (tests/mainjob/timings.json). Checks that every
# task reaches DONE through the states the state machine must take with
# these recordings (seeding, a repair, the optimisation rounds), with the
# expected rounds, repairs, best kernel and speedups, and that `kclaw
# report` over the same service agrees.
set -eu
BIN=${KCLAW_BIN:?set KCLAW_BIN to the build bin folder}
SRC=${KCLAW_SRC:?KCLAW_SRC must name the source tree}
HERE="$SRC/tests/mainjob"
T=$(mktemp -d /tmp/kc-mainjob.XXXXXX)
cleanup() {
	"$BIN/kclaw" --home "$T/home" up --stop >/dev/null 2>&1 || true
	"$BIN/kclaw" --home "$T/home2" up --stop >/dev/null 2>&1 || true
	rm -rf "$T"
}
trap cleanup EXIT

python3 "$SRC/examples/recordings/generate.py" --check
python3 "$HERE/mainjob.py" table "$T/table" "$T/expect.json"
cat >"$T/sandbox" <<EOF
#!/bin/sh
exec "$BIN/kclaw-sandbox" --child "$BIN/mainjob_table_child" "\$@"
EOF
chmod +x "$T/sandbox"
unset KCLAW_LLM_MODEL KCLAW_LLM_REPLAY KCLAW_LLM_BASE_URL KCLAW_HOME || true
export KCLAW_SANDBOX_BIN="$T/sandbox" MAINJOB_TABLE="$T/table"
export KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1

rc=0
"$BIN/kclaw" --home "$T/home" main --skip-gpu-check --keep --json \
	--examples "$SRC/examples" >"$T/report.json" 2>"$T/progress.log" || rc=$?
cat "$T/progress.log"
if [ "$rc" != 0 ]; then
	echo "FAIL: kclaw main exited $rc"
	tail -n 20 "$T"/home/run/*.log
	exit 1
fi
python3 "$HERE/mainjob.py" report "$T/report.json" "$T/expect.json"

# The progress stream: one line per notable event, the repair among them.
for want in "service up in" "agents answer from recordings" \
	"DIAGNOSE -> REPAIR" "round 4: OK" "DONE: stopped: round budget spent" \
	"evaluated c0001"; do
	grep -q "$want" "$T/progress.log" ||
		{ echo "FAIL: no '$want' in the progress"; exit 1; }
done

# Each task's own events, from the kept service's log.
python3 "$HERE/mainjob.py" ids "$T/report.json" >"$T/ids"
while read -r id name; do
	"$BIN/kclaw" --home "$T/home" watch "$id" --no-follow --json \
		>"$T/ev-$name.jsonl"
	python3 "$HERE/mainjob.py" events "$T/ev-$name.jsonl" \
		"$T/expect.json" "$name"
done <"$T/ids"

# kclaw report over the same service: all finished tasks, table and JSON.
"$BIN/kclaw" --home "$T/home" report --json >"$T/report2.json"
python3 "$HERE/mainjob.py" report "$T/report2.json" "$T/expect.json"
"$BIN/kclaw" --home "$T/home" report >"$T/table.txt"
cat "$T/table.txt"
grep -q "6 task(s): success 6/6 (100%), fast_1 6/6 (100%)" "$T/table.txt" ||
	{ echo "FAIL: the table's summary line"; exit 1; }
grep -Eq "^softmax_rows +[0-9a-f]+ +DONE +39.70x +- " "$T/table.txt" ||
	{ echo "FAIL: the softmax_rows row"; exit 1; }
first=$(head -n 1 "$T/ids" | cut -d' ' -f1)
"$BIN/kclaw" --home "$T/home" report "$first" --json >"$T/one.json"
python3 "$HERE/mainjob.py" report "$T/one.json" "$T/expect.json" bias_gelu

"$BIN/kclaw" --home "$T/home" up --stop >/dev/null

# A KernelBench-style bundle (a `tensors` reference with a recorded
# torch.compile time): the report's figures over torch.compile.
python3 "$HERE/mainjob.py" tensors-bundle bias_gelu "$T/kb/bias_gelu" \
	0.165 0.05
"$BIN/kclaw" --home "$T/home2" main --skip-gpu-check --keep --examples "$T/kb" \
	--recordings "$SRC/examples/recordings" bias_gelu >"$T/kb.txt" 2>&1 ||
	{ cat "$T/kb.txt"; echo "FAIL: kclaw main on the tensors bundle"; exit 1; }
grep -Eq "^bias_gelu +[0-9a-f]+ +DONE +4.29x +1.30x +0.1650 +0.0385 +4 +1 +0$" \
	"$T/kb.txt" || { cat "$T/kb.txt"; echo "FAIL: the row"; exit 1; }
grep -q "over torch.compile (1 known): fast_1 1/1, geomean 1.30x" \
	"$T/kb.txt" || { echo "FAIL: the torch.compile summary"; exit 1; }
"$BIN/kclaw" --home "$T/home2" report --json >"$T/kb.json"
"$BIN/kclaw" --home "$T/home2" up --stop >/dev/null
python3 "$HERE/mainjob.py" compile-report "$T/kb.json" bias_gelu 0.165 0.05 \
	0.03846153846
echo "mainjob_replay: ok"
