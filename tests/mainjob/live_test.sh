#!/bin/sh
# mainjob_live: `kclaw main --live` on the six examples against the provider
# emulator (tests/agents/llm_server.py in its model-like mode: the replies a
# model would give, built from the examples' hand-written candidates, with
# a 429 and Retry-After, a 503, a malformed reply re-asked, a cut-off reply,
# a cut-off HTTP body and reasoning inline and in reasoning_content on the
# way), with the real kclawd, kclaw-agent workers making real HTTP calls
# and the real kclaw-sandbox whose child answers from the table of
# mainjob_replay. Every task must reach DONE with the recordings' figures,
# the report must show the emulator's usage summed as tokens (and the cost
# at the kclaw.json prices, where the report prices), and `--record` must
# write a recording that a second `kclaw main --recordings` replays with an
# identical report and identical agent replies, without a request to the
# emulator.
set -eu
BIN=${KCLAW_BIN:?set KCLAW_BIN to the build bin folder}
SRC=${KCLAW_SRC:?KCLAW_SRC must name the source tree}
HERE="$SRC/tests/mainjob"
T=$(mktemp -d /tmp/kc-mainjob-live.XXXXXX)
EMU=
cleanup() {
	"$BIN/kclaw" --home "$T/home" up --stop >/dev/null 2>&1 || true
	"$BIN/kclaw" --home "$T/replay" up --stop >/dev/null 2>&1 || true
	[ -z "$EMU" ] || kill "$EMU" 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	exit 1
}

. "$SRC/tests/agents/emu.sh"
emu_start "$SRC" "$T" || fail "the emulator did not start"
URL=$EMU_URL
python3 "$HERE/live.py" script "$URL" "$SRC/examples/recordings"

python3 "$HERE/mainjob.py" table "$T/table" "$T/expect.json"
cat >"$T/sandbox" <<EOS
#!/bin/sh
exec "$BIN/kclaw-sandbox" --child "$BIN/mainjob_table_child" "\$@"
EOS
chmod +x "$T/sandbox"
unset KCLAW_LLM_REPLAY KCLAW_LLM_RECORD KCLAW_HOME KCLAW_LLM_API_KEY_FILE || true
export KCLAW_SANDBOX_BIN="$T/sandbox" MAINJOB_TABLE="$T/table"
export KCLAW_CUDA_DRIVER=/nonexistent/libcuda.so.1
KEY=sk-live-test-7f3a9c
export KCLAW_LLM_MODEL=kclaw-emu-1 KCLAW_LLM_BASE_URL="$URL/v1" \
	KCLAW_LLM_API_KEY=$KEY KCLAW_LLM_BACKOFF_MS=50 KCLAW_LLM_MAX_TRIES=3
PRICES='{"prices": {"kclaw-emu*": {"prompt": 2, "completion": 8,
	"cached_prompt": 0.5, "reasoning": 6}}}'
mkdir -p "$T/home" "$T/replay"
echo "$PRICES" >"$T/home/kclaw.json"
echo "$PRICES" >"$T/replay/kclaw.json"
echo "$PRICES" >"$T/prices.json"

# --live without a model, and with recordings: refused before anything.
rc=0
env -u KCLAW_LLM_MODEL "$BIN/kclaw" --home "$T/x" main --live \
	--skip-gpu-check --examples "$SRC/examples" >"$T/out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q -- "--live needs a model" "$T/out" ||
	{ cat "$T/out"; fail "--live without a model exited $rc"; }
rc=0
"$BIN/kclaw" --home "$T/x" main --live --recordings "$SRC/examples/recordings" \
	--skip-gpu-check >"$T/out" 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat "$T/out"; fail "--live --recordings exited $rc"; }
rc=0
env -u KCLAW_LLM_MODEL "$BIN/kclaw" --home "$T/x" main --record "$T/r0" \
	--skip-gpu-check --examples "$SRC/examples" >"$T/out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q -- "--record records a model's replies" "$T/out" ||
	{ cat "$T/out"; fail "--record with recordings exited $rc"; }
[ ! -e "$T/x/run/up.log" ] || fail "a service started for a refused run"

rc=0
"$BIN/kclaw" --home "$T/home" main --live --record "$T/rec" \
	--manifest "$SRC/examples/recordings/main.json" --skip-gpu-check --keep \
	--json --examples "$SRC/examples" >"$T/live.json" 2>"$T/live.log" ||
	rc=$?
cat "$T/live.log"
if [ "$rc" != 0 ]; then
	tail -n 20 "$T"/home/run/*.log
	fail "kclaw main --live exited $rc"
fi
for want in "agents answer from model kclaw-emu-1 at $URL/v1; recording to" \
	"planner replied: " "DONE: stopped: round budget spent"; do
	grep -q "$want" "$T/live.log" || fail "no '$want' in the progress"
done
curl -s "$URL/_model" >"$T/served.json"
python3 "$HERE/live.py" check "$T/live.json" "$T/expect.json" \
	"$T/served.json" "$T/rec" "$T/prices.json" "$KEY"
grep -q "$KEY" "$T"/home/run/*.log && fail "the API key is in a log"
python3 "$HERE/mainjob.py" ids "$T/live.json" >"$T/ids"
while read -r id name; do
	"$BIN/kclaw" --home "$T/home" watch "$id" --no-follow --json \
		>"$T/ev-live-$name.jsonl"
	python3 "$HERE/live.py" replies "$T/ev-live-$name.jsonl" \
		>"$T/replies-live-$name"
done <"$T/ids"
"$BIN/kclaw" --home "$T/home" up --stop >/dev/null

# The recording replays: same tasks and budgets (its main.json), by replay
# key (prompts carry what long-term memory learned from the other tasks so
# far, which the interleaving decides), no request to the emulator,
# the same report and the same replies.
n=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['served']))" \
	"$T/served.json")
rc=0
"$BIN/kclaw" --home "$T/replay" main \
	--recordings "$T/rec" --skip-gpu-check --keep --json \
	--examples "$SRC/examples" >"$T/replay.json" 2>"$T/replay.log" || rc=$?
if [ "$rc" != 0 ]; then
	cat "$T/replay.log"
	tail -n 20 "$T"/replay/run/*.log
	fail "the replay of the live recording exited $rc"
fi
grep -q "agents answer from recordings $T/rec" "$T/replay.log" ||
	fail "the replay did not replay: $(head -n 3 "$T/replay.log")"
curl -s "$URL/_model" >"$T/served2.json"
n2=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['served']))" \
	"$T/served2.json")
[ "$n" = "$n2" ] || fail "the replay sent $((n2 - n)) request(s) to the emulator"
python3 "$HERE/live.py" same "$T/live.json" "$T/replay.json"
python3 "$HERE/mainjob.py" ids "$T/replay.json" >"$T/ids2"
while read -r id name; do
	"$BIN/kclaw" --home "$T/replay" watch "$id" --no-follow --json \
		>"$T/ev-replay-$name.jsonl"
	python3 "$HERE/live.py" replies "$T/ev-replay-$name.jsonl" \
		>"$T/replies-replay-$name"
	cmp -s "$T/replies-live-$name" "$T/replies-replay-$name" || {
		diff "$T/replies-live-$name" "$T/replies-replay-$name" | head
		fail "$name: the replay's agent replies or evaluations differ"
	}
done <"$T/ids2"
"$BIN/kclaw" --home "$T/replay" up --stop >/dev/null
echo "mainjob_live: ok"
