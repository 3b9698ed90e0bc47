#!/bin/sh
# KernelBench through `kclaw kernelbench` on a GPU machine (a benchmark,
# not CI). Run from the repository root:
#
#   sh tools/kernelbench/kb-h200-bench.sh BIN_DIR KB_DIR [OUT]
#
# BIN_DIR holds the built binaries (build-rel/bin), KB_DIR a KernelBench
# tree (level1/ level2/ level3/, e.g. ../shared/kernelbench), OUT the log
# folder (default $OUT, else ./kb-bench-out). $KCLAW_PYTHON must have
# PyTorch (default python3). Three parts, about 9 minutes in all:
#
# 1. Conversion: every problem of Levels 1-3 through ONE kb2bundle.py
#    --batch process (PyTorch imported once), timed: OUT/convert.jsonl (the
#    protocol's lines), OUT/convert.txt (converted, failed, import, wall,
#    per-problem median and max).
# 2. The command: `kclaw kernelbench` on a subset of every level (the
#    problems tests/gpu/kernelbench has hand-written kernels for), the
#    agents asking the provider emulator (tests/agents/llm_server.py, its
#    model-like mode) whose replies are those kernels (a scripted model:
#    kb-emu-replies.py); killed with SIGKILL once two tasks have ended,
#    the service stopped (`kclaw up --stop`), the same command run again to
#    the end. OUT/kb/ holds its report (report.txt, report.json, run.json);
#    OUT/bench.txt says whether any problem ran twice or was lost.
# 3. The same at full size (KB_ALL=0 leaves it out): every problem, one
#    round, SIGKILLed once KB_ALL_KILL_AT (60) tasks have ended, resumed
#    (within KB_ALL_RESUME_S, 330 s); OUT/kball/ holds its report.
set -u
BIN=$(cd "${1:?BIN_DIR}" && pwd)
KB=$(cd "${2:?KB_DIR}" && pwd)
O=${3:-${OUT:-kb-bench-out}}
mkdir -p "$O"
O=$(cd "$O" && pwd)
SRC=$(pwd)
PY=${KCLAW_PYTHON:-python3}
K="$BIN/kclaw"
H="$O/home"
HA="$O/home-all"
EMU=
say() { echo "$*" | tee -a "$O/bench.txt"; }
cleanup() { # both parts' services (the resumed runs keep theirs up)
	"$K" --home "$H" up --stop >/dev/null 2>&1
	[ ! -d "$HA" ] || "$K" --home "$HA" up --stop >/dev/null 2>&1
	[ -z "$EMU" ] || kill "$EMU" 2>/dev/null
}
trap cleanup EXIT
: >"$O/bench.txt"
say "commit $(cat "$BIN/../COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo ?) date $(date -u +%Y-%m-%dT%H:%MZ) host $(hostname)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu /' | tee -a "$O/bench.txt"

# ---- 1. all problems, one converter process
rm -rf "$O/bundles-all"
mkdir -p "$O/bundles-all"
for l in 1 2 3; do
	for f in "$KB"/level$l/*.py; do
		n=$(basename "$f" .py)
		printf '{"problem": "%s", "out": "%s/bundles-all/L%s_%s"}\n' "$f" "$O" "$l" "$n"
	done
done >"$O/convert.requests"
t0=$(date +%s.%N)
"$PY" "$SRC/tools/kernelbench/kb2bundle.py" --batch <"$O/convert.requests" \
	>"$O/convert.jsonl" 2>"$O/convert.log"
t1=$(date +%s.%N)
python3 - "$O/convert.jsonl" "$t0" "$t1" <<'PY' | tee -a "$O/bench.txt" "$O/convert.txt"
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ready, rows = lines[0], lines[1:]
if not ready.get("ready"):
    print("convert: the converter refused: %s" % ready.get("error"))
    sys.exit(0)
ok = [r for r in rows if r.get("ok")]
ms = sorted(r["ms"] for r in rows)
print("convert: %d of %d converted in one process, %.1f s wall (PyTorch %s, import %.2f s); "
      "per problem median %.0f ms, max %.0f ms"
      % (len(ok), len(rows), float(sys.argv[3]) - float(sys.argv[2]), ready.get("torch"),
         ready.get("import_s", 0), statistics.median(ms) if ms else 0, ms[-1] if ms else 0))
for r in rows:
    if not r.get("ok"):
        print("  failed %s: %s" % (r.get("problem"), r.get("error")))
PY

# ---- 2. the command, killed once and resumed
rm -rf "$O/kbsub" "$O/kb" "$O/replies" "$H"
python3 "$SRC/tools/kernelbench/kb-emu-replies.py" "$SRC/tests/gpu/kernelbench" \
	"$O/replies" --only relu,softmax,layernorm,gemm_chain,mlp >"$O/subset.txt"
while read -r p; do
	mkdir -p "$O/kbsub/$(dirname "$p")"
	ln -s "$KB/$p" "$O/kbsub/$p"
done <"$O/subset.txt"
NSUB=$(wc -l <"$O/subset.txt")
python3 "$SRC/tests/agents/llm_server.py" --port-file "$O/port" 2>"$O/emulator.log" &
EMU=$!
i=0
while [ ! -s "$O/port" ]; do
	i=$((i + 1)); [ $i -lt 100 ] || { say "the emulator did not start"; exit 1; }
	sleep 0.1
done
URL="http://127.0.0.1:$(cat "$O/port")"
python3 -c '
import json, sys, urllib.request
body = json.dumps({"actions": [], "model": {"recordings": sys.argv[2]}}).encode()
urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/_script", data=body, method="POST"), timeout=10).read()' \
	"$URL" "$O/replies"
export KCLAW_LLM_MODEL=kclaw-emu-1 KCLAW_LLM_BASE_URL="$URL/v1" KCLAW_LLM_API_KEY=sk-bench
export KCLAW_PYTHON="$PY"
ARGS="--home $H kernelbench $O/kbsub --rounds 2 --out $O/kb --agents 1"

ended() { # [HOME]: tasks ended, tasks in all
	"$K" --home "${1:-$H}" status --json 2>/dev/null | python3 -c '
import json, sys
try:
    t = json.load(sys.stdin).get("tasks", [])
except ValueError:
    t = []
print(sum(x["state"] in ("done", "failed", "cancelled") for x in t), len(t))'
}
t0=$(date +%s)
"$K" $ARGS >"$O/run1.log" 2>&1 &
RUN=$!
while kill -0 "$RUN" 2>/dev/null; do
	set -- $(ended)
	[ "${1:-0}" -ge 2 ] && break
	[ $(($(date +%s) - t0)) -gt 240 ] && break
	sleep 1
done
if kill -0 "$RUN" 2>/dev/null; then
	kill -9 "$RUN"
	say "killed the first run after $(($(date +%s) - t0)) s with $(ended | cut -d' ' -f1) task(s) ended of $(ended | cut -d' ' -f2)"
else
	say "the first run ended before the kill (exit $(wait "$RUN"; echo $?)); the resume below checks nothing"
fi
wait "$RUN" 2>/dev/null
"$K" --home "$H" up --stop >/dev/null 2>&1
t1=$(date +%s)
"$K" $ARGS --keep >"$O/run2.log" 2>&1
rc=$?
say "resumed run: exit $rc after $(($(date +%s) - t1)) s; $(grep -h 'resuming:' "$O/run2.log")"
"$K" --home "$H" status --json >"$O/status.json" 2>/dev/null
python3 - "$O/status.json" "$O/kb/run.json" "$NSUB" <<'PY' | tee -a "$O/bench.txt"
import json, sys
st, run, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
ids = [t["id"] for t in st["tasks"]]
mine = [p["task_id"] for p in run["problems"]]
print("tasks in the service %d (distinct %d) for %d problems; lost: %s; states: %s" % (
    len(ids), len(set(ids)), n, sorted(set(mine) - set(ids)) or "none",
    ", ".join("%s %s" % (p["name"], p["state"]) for p in run["problems"])))
PY
cat "$O/kb/report.txt" >>"$O/bench.txt" 2>/dev/null
tail -n 40 "$O/kb/report.txt" 2>/dev/null
[ "${KB_ALL:-1}" = 1 ] || exit $rc

# ---- 3. every problem of Levels 1-3, unattended, killed once and resumed
# The scripted model has kernels for the cases of tests/gpu/kernelbench; for
# every other problem it answers 500 ("no scripted reply"), so those tasks
# fail at their first model job: what this part measures is the command at
# full size (conversion, 250 submissions, reference checks, progress, the
# kill, the resume, the report), not kernels. One try per call
# (KCLAW_LLM_MAX_TRIES=1): with the default five, every unscripted job held
# an agent ~10 s per attempt, and 250 tasks on two generator agents took
# hours (1 of 250 ended in 200 s on the H200).
rm -rf "$O/kball" "$O/replies-all" "$HA"
"$K" --home "$H" up --stop >/dev/null 2>&1
python3 "$SRC/tools/kernelbench/kb-emu-replies.py" "$SRC/tests/gpu/kernelbench" \
	"$O/replies-all" >"$O/subset-all.txt"
python3 -c '
import json, sys, urllib.request
body = json.dumps({"actions": [], "model": {"recordings": sys.argv[2]}}).encode()
urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/_script", data=body, method="POST"), timeout=10).read()' \
	"$URL" "$O/replies-all"
ALL="--home $HA kernelbench $KB --rounds 1 --out $O/kball --agents 2"
KILL_AT=${KB_ALL_KILL_AT:-60}
t0=$(date +%s)
KCLAW_LLM_MAX_TRIES=1 "$K" $ALL >"$O/all1.log" 2>&1 &
RUN=$!
while kill -0 "$RUN" 2>/dev/null; do
	set -- $(ended "$HA")
	[ "${1:-0}" -ge "$KILL_AT" ] && break
	[ $(($(date +%s) - t0)) -gt "${KB_ALL_KILL_S:-200}" ] && break
	sleep 1
done
if kill -0 "$RUN" 2>/dev/null; then
	kill -9 "$RUN"
	say "all problems: killed the first run after $(($(date +%s) - t0)) s with $(ended "$HA" | cut -d' ' -f1) task(s) ended of $(ended "$HA" | cut -d' ' -f2)"
else
	say "all problems: the first run ended before the kill (exit $(wait "$RUN"; echo $?))"
fi
wait "$RUN" 2>/dev/null
"$K" --home "$HA" up --stop >/dev/null 2>&1
t1=$(date +%s)
KCLAW_LLM_MAX_TRIES=1 timeout -k 5 "${KB_ALL_RESUME_S:-330}" "$K" $ALL --keep >"$O/all2.log" 2>&1
rc3=$?
say "all problems: resumed run exit $rc3 after $(($(date +%s) - t1)) s ($(($(date +%s) - t0)) s since the first start); $(grep -h 'resuming:' "$O/all2.log")"
"$K" --home "$HA" status --json >"$O/status-all.json" 2>/dev/null
python3 - "$O/status-all.json" "$O/kball/run.json" "$O/convert.requests" <<'PY' | tee -a "$O/bench.txt"
import collections, json, sys
st = json.load(open(sys.argv[1]))
n = sum(1 for l in open(sys.argv[3]) if l.strip())
ids = [t["id"] for t in st["tasks"]]
states = collections.Counter(t["state"] for t in st["tasks"])
try:
    run = json.load(open(sys.argv[2]))
    mine = [p["task_id"] for p in run["problems"]]
except (OSError, ValueError, KeyError):
    mine = []
print("all problems: tasks in the service %d (distinct %d) for %d problems; in run.json %d; "
      "lost: %s; states: %s" % (len(ids), len(set(ids)), n, len(mine),
                                 len(set(mine) - set(ids)) if mine else "run.json missing",
                                 dict(states)))
PY
head -n 30 "$O/kball/report.txt" >>"$O/bench.txt" 2>/dev/null
[ $rc -eq 0 ] || exit $rc
exit $rc3
