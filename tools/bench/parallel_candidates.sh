#!/bin/sh
# Candidates in parallel on a GPU (docs/orchestrator.md "Candidates in
# parallel"): `kclaw main --live` on shipped examples against the provider
# emulator (tests/agents/llm_server.py, model-like mode over
# examples/recordings, cycling past them) answering every call after
# LATENCY seconds, once with one candidate per round and once with K, at
# the same token budget. Prints, per task and K, the wall time from submit
# to finish, the best speedup, the tokens and the rounds, tuning's share of
# the final speedup (log of best over best not from tuning, over log of
# best) and the GPU's busy fraction (the evaluations' wall time in the
# sandbox over the task's); a summary line per K. Logs and reports under
# $OUT.
#
#   tools/bench/parallel_candidates.sh
#
# Environment: KCLAW_BIN (a build's bin folder; default: builds
# build-bench, RelWithDebInfo), OUT (default /tmp/kc-parallel), LATENCY
# (seconds per model reply, default 5), TOKENS (the token budget of every
# task, default 150000), ROUNDS (default 24), K (default 4), TUNE (1:
# both runs also tune every correct kernel's launch configuration between
# rounds; each line then says how many tune candidates were made and
# promoted and whether the best kernel is one), TASKS
# (default "layernorm softmax_rows sum_reduce"), MAIN_ARGS (more
# arguments to `kclaw main`, e.g. --skip-gpu-check for a dry run with a
# scripted sandbox through KCLAW_SANDBOX_BIN).
set -eu
cd "$(dirname "$0")/../.."
SRC=$(pwd)
OUT=${OUT:-/tmp/kc-parallel}
LATENCY=${LATENCY:-5}
TOKENS=${TOKENS:-150000}
ROUNDS=${ROUNDS:-24}
K=${K:-4}
TASKS=${TASKS:-"layernorm softmax_rows sum_reduce"}
if [ -z "${KCLAW_BIN:-}" ]; then
	cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DKC_SANITIZE=OFF >"$OUT.cmake.log" 2>&1 || {
		cat "$OUT.cmake.log"
		exit 1
	}
	cmake --build build-bench -j 8 --target kclaw kclawd kclaw-agent \
		kclaw-sandbox kclaw-sandbox-child >>"$OUT.cmake.log" 2>&1 || {
		tail -30 "$OUT.cmake.log"
		exit 1
	}
	KCLAW_BIN=$SRC/build-bench/bin
fi
rm -rf "$OUT"
mkdir -p "$OUT"
EMU=
cleanup() {
	for k in 1 "$K"; do
		"$KCLAW_BIN/kclaw" --home "$OUT/k$k" up --stop >/dev/null 2>&1 ||
			true
	done
	[ -z "$EMU" ] || kill "$EMU" 2>/dev/null || true
}
trap cleanup EXIT

python3 tests/agents/llm_server.py --port-file "$OUT/port" \
	--latency "$LATENCY" >"$OUT/emulator.log" 2>&1 &
EMU=$!
i=0
while [ ! -s "$OUT/port" ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || {
		echo "the emulator did not start"
		exit 1
	}
	sleep 0.1
done
URL="http://127.0.0.1:$(cat "$OUT/port")"

unset KCLAW_LLM_REPLAY KCLAW_LLM_RECORD KCLAW_HOME || true
export KCLAW_LLM_MODEL=kclaw-emu-1 KCLAW_LLM_BASE_URL="$URL/v1" \
	KCLAW_LLM_API_KEY=sk-bench-not-secret
for k in 1 "$K"; do
	H="$OUT/k$k"
	mkdir -p "$H"
	# Each run from the emulator's first replies: the same model.
	python3 - "$URL" "$SRC/examples/recordings" <<'EOF'
import json, sys, urllib.request
body = json.dumps({"actions": [], "model": {"recordings": sys.argv[2],
                                            "cycle": True}}).encode()
urllib.request.urlopen(urllib.request.Request(
    sys.argv[1] + "/_script", data=body,
    headers={"Content-Type": "application/json"})).read()
EOF
	cat >"$H/kclaw.json" <<EOF
{"orchestrator": {"candidates_per_round": $k, "tokens": $TOKENS,
  "rounds": $ROUNDS, "tune": ${TUNE:-0}}}
EOF
	# shellcheck disable=SC2086
	"$KCLAW_BIN/kclaw" --home "$H" main --live --keep --json \
		--rounds "$ROUNDS" --agents "$K" --examples "$SRC/examples" \
		${MAIN_ARGS:-} $TASKS >"$H/report.json" 2>"$H/progress.log" || true
	for id in $(python3 -c 'import json,sys
for t in json.load(open(sys.argv[1]))["tasks"]: print(t["id"])' \
		"$H/report.json"); do
		"$KCLAW_BIN/kclaw" --home "$H" status "$id" --json \
			>"$H/status-$id.json" || true
		"$KCLAW_BIN/kclaw" --home "$H" result "$id" --json \
			>"$H/result-$id.json" || true
	done
	"$KCLAW_BIN/kclaw" --home "$H" up --stop >/dev/null 2>&1 || true
	# What the emulator served in this run.
	python3 - "$URL" "$H/served.json" <<'EOF2'
import json, sys, urllib.request
served = json.load(urllib.request.urlopen(sys.argv[1] + "/_model"))
json.dump(served, open(sys.argv[2], "w"))
EOF2
done

python3 - "$OUT" "$K" "$SRC/tools/bench" <<'EOF'
import json, math, os, sys
out, kk = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from tune_share import find, mean, pct, tune_share_and_busy


lines = []
for k in ("1", kk):
    rep = json.load(open(os.path.join(out, "k" + k, "report.json")))
    walls, sps, shares, busies = [], [], [], []
    for t in rep["tasks"]:
        st = json.load(open(os.path.join(out, "k" + k,
                                         "status-%s.json" % t["id"])))
        c = find(st, "created_unix_ms", "createdUnixMs")
        f = find(st, "finished_unix_ms", "finishedUnixMs")
        wall = (float(f) - float(c)) / 1000 if c and f else float("nan")
        sp = t.get("speedup") or 0
        walls.append(wall)
        if sp:
            sps.append(sp)
        tunes = find(st, "tune_candidates") or 0
        promoted = find(st, "tune_promotions") or 0
        from_tune = bool(find(st, "best_from_tune"))
        share, busy = tune_share_and_busy(
            os.path.join(out, "k" + k, "result-%s.json" % t["id"]), wall)
        shares.append(share)
        busies.append(busy)
        lines.append("K=%s %-16s %-6s wall %7.1f s  best %.3fx  tokens "
                     "%7d  rounds %d  tunes %d promoted %d best_from_tune "
                     "%s  tuning's share %s  GPU busy %s" % (
                         k, t["name"], t["state"], wall, sp, t["tokens"],
                         t["rounds"], tunes, promoted, from_tune,
                         pct(share), pct(busy)))
    geo = math.exp(sum(map(math.log, sps)) / len(sps)) if sps else 0
    lines.append("K=%s summary: mean wall %.1f s, geomean best speedup "
                 "%.3fx over %d tasks; tuning's share of the final speedup "
                 "%s (mean), GPU busy %s (mean)" % (
                     k, sum(walls) / len(walls), geo, len(walls),
                     pct(mean(shares)), pct(mean(busies))))
    # Prompt caching: the share of each prompt's bytes identical, from its
    # start, to the previous prompt of its role on its task (the first of
    # each is left out), by role; and the cached tokens the emulator
    # reported, as a share of the prompt tokens.
    served = json.load(open(os.path.join(out, "k" + k, "served.json")))
    seen, share, pt, ct = set(), {}, 0, 0
    for e in served["served"]:
        if e.get("status") != 200:
            continue
        pt += e["prompt_tokens"]
        ct += e["cached_tokens"]
        key = (e["task"], e["role"])
        if key in seen:
            share.setdefault(e["role"], []).append(e["prefix_share"])
        seen.add(key)
    lines.append("K=%s prompt prefix shared with the role's previous "
                 "prompt: %s; cached tokens %.0f%% of prompt tokens" % (
                     k, ", ".join("%s %.2f" % (r, sum(v) / len(v))
                                  for r, v in sorted(share.items())),
                     100.0 * ct / pt if pt else 0))
print("\n".join(lines))
open(os.path.join(out, "summary.txt"), "w").write("\n".join(lines) + "\n")
EOF
