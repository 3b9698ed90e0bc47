#!/bin/sh
# cli_test.sh - `kclaw memory` driven as a process, the way a user does:
# import (valid, unchanged, invalid), export and re-import, methods,
# explain (evidence file, stored candidate), stats, a store held by another
# process, usage errors and --help.
set -u
K="$KCLAW_BIN/kclaw"
FIX="$KCLAW_BIN/memory_store_fixture"
T=$(mktemp -d /tmp/kc-memory-cli-XXXXXX)
H="$T/home"
HOLDER=""
ORCH=""
fails=0

cleanup() {
	if [ -n "$ORCH" ]; then
		kill "$ORCH" 2>/dev/null
		wait "$ORCH" 2>/dev/null
	fi
	if [ -n "$HOLDER" ]; then
		exec 3>&-
		wait "$HOLDER" 2>/dev/null
	fi
	rm -rf "$T"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	fails=$((fails + 1))
}

# run EXPECTED_RC CMD...: runs, keeps stdout in $T/out and stderr in $T/err
run() {
	want=$1
	shift
	"$@" >"$T/out" 2>"$T/err"
	rc=$?
	if [ "$rc" -ne "$want" ]; then
		fail "'$*' exited $rc, want $want"
		sed 's/^/  out: /' "$T/out" | head -20 >&2
		sed 's/^/  err: /' "$T/err" | head -20 >&2
	fi
}

has() { # has FILE TEXT
	grep -qF -- "$2" "$1" || {
		fail "$1 lacks '$2'"
		sed 's/^/  | /' "$1" | head -20 >&2
	}
}

json() { # json FILE PYTHON_EXPR: the expression over d must be true
	python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1" ||
		fail "$1: JSON check failed: $2"
}

# Nothing there yet.
run 3 "$K" --home "$H" memory stats
has "$T/err" "no store at $H/db"

# Import: new, then unchanged; JSON.
run 0 "$K" --home "$H" memory import "$KCLAW_SRC/store/knowledge"
has "$T/out" "as knowledge version 1"
has "$T/out" "40 methods"
run 0 "$K" --home "$H" memory import "$KCLAW_SRC/store/knowledge" --json
json "$T/out" "d['version'] == 1 and d['changed'] is False and d['methods'] >= 30 and d['classes'] >= 8"

# Invalid knowledge is refused with file, place and problem; the head stays.
mkdir -p "$T/bad"
cp "$KCLAW_SRC/store/knowledge/methods.json" "$T/bad/"
python3 - "$KCLAW_SRC/store/knowledge/policy.json" "$T/bad/policy.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["rules"][2]["allow"].append("warp_drive")
json.dump(p, open(sys.argv[2], "w"), indent=2)
EOF
run 1 "$K" --home "$H" memory import "$T/bad"
line=$(grep -n '"name": "launch_merge"' "$T/bad/policy.json" | cut -d: -f1)
has "$T/err" "$T/bad/policy.json:$line: "
has "$T/err" "rules[2] \"launch_merge\": allow: method 'warp_drive' is not defined"
run 3 "$K" --home "$H" memory import "$T/nonexistent"
has "$T/err" "cannot read $T/nonexistent/policy.json"

# Export, re-import: same content.
run 0 "$K" --home "$H" memory export "$T/exp"
has "$T/out" "exported knowledge version 1"
[ -s "$T/exp/policy.json" ] && [ -s "$T/exp/methods.json" ] || fail "export wrote no files"
run 0 "$K" --home "$H" memory import "$T/exp"
has "$T/out" "unchanged: knowledge version 1"

# Methods.
run 0 "$K" --home "$H" memory methods
has "$T/out" "tensor_core_mma"
run 0 "$K" --home "$H" memory methods --json
json "$T/out" "len(d['methods']) >= 30 and all(m['cues']['hopper'] for m in d['methods'])"

# Explain from an evidence file.
cat >"$T/ev.json" <<'EOF'
{"metrics": {"dram_throughput_pct": 90, "sm_throughput_pct": 20},
 "runtime": {"duration_us": 500, "num_launches": 1}}
EOF
run 0 "$K" --home "$H" memory explain --evidence "$T/ev.json"
has "$T/out" "fired bandwidth_widen"
has "$T/out" "1. vectorized_access"
run 0 "$K" --home "$H" memory explain --evidence "$T/ev.json" --json
json "$T/out" "d['primary'] == 'memory_bandwidth' and d['recommendations'][0]['method'] == 'vectorized_access' and 'bandwidth_widen' in d['fired']"
echo '{"metrics": {"dram_throughput_pct": "high"}}' >"$T/bad.json"
run 1 "$K" --home "$H" memory explain --evidence "$T/bad.json"
has "$T/err" "'dram_throughput_pct' must be a number"

# Explain a stored candidate; stats after attempts were learned.
run 0 "$FIX" candidate "$H/db" cand-7
run 0 "$FIX" learn "$H/db"
run 0 "$K" --home "$H" memory explain cand-7
has "$T/out" "candidate cand-7"
has "$T/out" "signature: memory_bandwidth@sm80"
has "$T/out" "recommended when it was planned: vectorized_access"
has "$T/out" "vectorized_access (score 0.969, rule bandwidth_widen; learned: 2 attempts, 1 faster, mean gain +50.0%)"
has "$T/out" "what the Planner is shown for grid_stride_loop:"
run 3 "$K" --home "$H" memory explain cand-404
has "$T/err" "no candidate 'cand-404' in the store"
run 0 "$K" --home "$H" memory stats
has "$T/out" "memory_bandwidth@sm80"
has "$T/out" "* (all signatures)"
run 0 "$K" --home "$H" memory stats --json --signature compute_bound@sm90
json "$T/out" "d['knowledge']['version'] == 1 and d['learned'][0]['method'] == 'tensor_core_mma' and d['learned'][0]['best_speedup'] == 3.0 and d['learned'][0]['speedup_buckets']['>=2x'] == 1"

# A task's short-term memory as the agents see it.
run 0 "$FIX" short-term "$H/db" task-3
run 0 "$K" --home "$H" memory short-term task-3 --base k2
has "$T/out" "ended when kernel k2 passed; last fix: declare tid from blockIdx and threadIdx"
has "$T/out" "Optimisation attempts on base k2 (1)"
has "$T/out" "result: kernel k3 OK, 1.8x vs its base"
run 0 "$K" --home "$H" memory short-term task-3 --json --bytes 100
json "$T/out" "d['task'] == 'task-3' and 0 < len(d['opt_history'].encode()) <= 100 and len(d['repair_chain'].encode()) <= 100"
run 2 "$K" --home "$H" memory short-term task-3 --bytes 10
run 2 "$K" --home "$H" memory short-term

# A store held by another process (the orchestrator at run time).
mkfifo "$T/fifo"
"$FIX" hold "$H/db" "$T/ready" <"$T/fifo" &
HOLDER=$!
exec 3>"$T/fifo"
i=0
while [ ! -f "$T/ready" ] && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
run 1 "$K" --home "$H" memory stats
has "$T/err" "held by the running orchestrator; stop the service or use the API"
has "$T/err" "and the API did not answer: no orchestrator runs in"
run 1 "$K" --home "$H" memory import
has "$T/err" "stop the service or use the API"
# Knowledge from files needs no store.
run 0 "$K" --home "$H" memory explain --evidence "$T/ev.json" --knowledge "$KCLAW_SRC/store/knowledge"
has "$T/out" "1. vectorized_access"
has "$T/err" "learned statistics not shown"
exec 3>&-
wait "$HOLDER"
HOLDER=""
run 0 "$K" --home "$H" memory stats

# With the orchestrator running, the commands go through its Memory rpc.
if [ -x "$KCLAW_BIN/kclawd" ]; then
	"$KCLAW_BIN/kclawd" --home "$H" >"$T/kclawd.log" 2>&1 &
	ORCH=$!
	i=0
	while [ ! -S "$H/run/api.ipc" ] && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	run 0 "$K" --home "$H" memory stats
	has "$T/out" "memory_bandwidth@sm80"
	run 0 "$K" --home "$H" memory explain cand-7
	has "$T/out" "recommended when it was planned: vectorized_access"
	kill "$ORCH"
	wait "$ORCH"
	ORCH=""
	run 0 "$K" --home "$H" memory stats
else
	echo "kclawd not built: the Memory rpc path is not checked" >&2
fi

# Usage errors and help.
run 2 "$K" --home "$H" memory
run 2 "$K" --home "$H" memory bogus
run 2 "$K" --home "$H" memory export
run 2 "$K" --home "$H" memory explain
run 2 "$K" --home "$H" memory stats --frobnicate
has "$T/err" "unknown option --frobnicate"
run 2 "$K" --home "$H" memory explain --evidence
for c in import export stats methods explain short-term; do
	run 0 "$K" memory "$c" --help
	has "$T/out" "usage: kclaw memory $c"
done
run 0 "$K" memory --help
has "$T/out" "explain --evidence FILE.json"

if [ "$fails" -ne 0 ]; then
	echo "$fails check(s) failed" >&2
	exit 1
fi
echo "memory CLI: all checks passed"
