#!/bin/sh
# fleet_netns: a fleet across hosts. Network namespaces are the hosts: the
# orchestrator (kclawd) on a, the agents (test doubles) on b, a real
# kclaw-sandbox with a scripted child on c, later another on d; each host
# has its own home, and no folder is shared. Tasks with `tensors` (.npy
# files submitted from b by content, fetched by the sandbox on c with the
# Blob rpc and checked by its child against their hashes) and `cuda`
# references run to DONE; host c is cut off (link down) in the middle of
# an evaluation and the job is re-issued to the sandbox on d; a worker and
# a blob fetch with a wrong token are refused. Skipped (exit 77) without
# root or network namespaces.
set -u
BIN=${KCLAW_BIN:?set KCLAW_BIN to the build bin folder}
SRC=${KCLAW_SRC:?KCLAW_SRC must name the source tree}
. "$SRC/tests/fleet/netns.sh"
fleet_probe
T=$(mktemp -d /tmp/kc-fleet.XXXXXX)
chmod 755 "$T"
trap 'fleet_clean; rm -rf "$T"' EXIT
unset KCLAW_HOME KCLAW_TOKEN KCLAW_API_URL KCLAW_WORK_URL KCLAW_EVENTS_URL \
	KCLAW_HTTP_URL KCLAW_INSECURE_TCP || true
fail() {
	echo "FAIL: $*"
	for f in "$T"/*.log; do
		[ -f "$f" ] || continue
		echo "== $f"
		tail -n 20 "$f"
	done
	exit 1
}
start=$(date +%s)

fleet_net a b c d || fail "cannot build the network"
A=$(fleet_ip a)
TOK="fleet-$$-$(date +%s)"
fleet_home "$T/a" "$A" "$TOK" \
	'"eval_timeout_ms": 60000, "poll_ms": 1000, "retry_backoff_ms": 100'
for h in b c d; do fleet_home "$T/$h" "$A" "$TOK"; done
: >"$T/fleet.log"

fleet_bg a "$T/a.log" "$BIN/kclawd" --home "$T/a"
up=0
for i in $(seq 100); do
	if fleet_on b "$BIN/kclaw" --home "$T/b" status >/dev/null 2>&1; then
		up=1
		break
	fi
	sleep 0.1
done
[ "$up" = 1 ] || fail "kclawd on host a did not answer host b"
fleet_on c "$BIN/kclaw" --home "$T/c" status >/dev/null 2>&1 ||
	fail "host c cannot reach kclawd"

for r in generator feature planner optimizer diagnoser repairer; do
	fleet_bg b "$T/b.log" "$BIN/kc-double" --role "$r" --home "$T/b"
done
fleet_bg c "$T/c.log" env KCLAW_WORKER_HOST=hostc FLEET_HOME="$T/c" \
	FLEET_LOG="$T/fleet.log" FLEET_SLOW=1 \
	"$BIN/kclaw-sandbox" --home "$T/c" --child "$BIN/fleet_child"

# The bundles live on host b only; 2^20 f32 = 4 MiB per tensor, so each is
# fetched in more than one chunk.
fleet_bundle "$T/b/bundles/tens" tens 1048576 1
fleet_bundle "$T/b/bundles/cu" cu 256 2 cuda
# The task cut off mid-job has a short deadline: its re-issue waits for it.
export FLEET_EVAL_TIMEOUT_S=4
fleet_bundle "$T/b/bundles/slow" slow_tens 65536 3
unset FLEET_EVAL_TIMEOUT_S
id_t=$(fleet_on b "$BIN/kclaw" --home "$T/b" submit "$T/b/bundles/tens") ||
	fail "submit tens: $id_t"
id_c=$(fleet_on b "$BIN/kclaw" --home "$T/b" submit "$T/b/bundles/cu") ||
	fail "submit cu: $id_c"

wait_done() { # HOST-HOME ID SECONDS
	for i in $(seq $(($3 * 10))); do
		s=$(fleet_state b "$1" "$2")
		case "$s" in
		DONE) return 0 ;;
		FAILED | CANCELLED) fail "task $2 ended $s" ;;
		esac
		sleep 0.1
	done
	fail "task $2 not DONE within $3 s (state $s)"
}
wait_done "$T/b" "$id_t" 45
wait_done "$T/b" "$id_c" 45
grep -q "^BAD" "$T/fleet.log" && fail "the child saw a bad tensor: $(grep ^BAD "$T/fleet.log")"
grep -q "^EVAL tens hostc 4$" "$T/fleet.log" ||
	fail "no evaluation of tens on host c with 4 verified blobs"
grep -q "^EVAL cu hostc 0$" "$T/fleet.log" ||
	fail "no evaluation of the cuda task on host c"
n=$(ls "$T/c/cache/blobs" | grep -c '^[0-9a-f]\{64\}$')
[ "$n" -eq 4 ] || fail "host c's cache holds $n blobs, not 4"
[ -e "$T/c/run/blobs" ] && fail "host c has a run/blobs folder: a shared path was used"
echo "ok: tensors and cuda tasks DONE across hosts; 4 blobs fetched to host c"

# Cut host c off in the middle of an evaluation: the job goes to host d.
id_s=$(fleet_on b "$BIN/kclaw" --home "$T/b" submit "$T/b/bundles/slow") ||
	fail "submit slow: $id_s"
for i in $(seq 200); do
	grep -q "^SLOW slow_tens hostc" "$T/fleet.log" && break
	sleep 0.1
done
grep -q "^SLOW slow_tens hostc 4$" "$T/fleet.log" ||
	fail "the slow task did not start on host c"
fleet_cut c
fleet_bg d "$T/d.log" env KCLAW_WORKER_HOST=hostd FLEET_HOME="$T/d" \
	FLEET_LOG="$T/fleet.log" \
	"$BIN/kclaw-sandbox" --home "$T/d" --child "$BIN/fleet_child"
wait_done "$T/b" "$id_s" 40
grep -q "^EVAL slow_tens hostd 4$" "$T/fleet.log" ||
	fail "the job was not re-issued to host d"
grep -q "^EVAL slow_tens hostc" "$T/fleet.log" &&
	fail "host c answered after it was cut off"
fleet_on b "$BIN/kclaw" --home "$T/b" watch "$id_s" --no-follow >"$T/ev.txt" 2>&1
echo "ok: host c cut off mid-job; the job was re-issued to host d"

# A worker with a wrong token is refused, and so is its blob fetch.
fleet_home "$T/e" "$A" "not-$TOK"
out=$(fleet_on d timeout 20 env KCLAW_WORKER_HOST=hoste \
	"$BIN/kclaw-sandbox" --home "$T/e" --child "$BIN/fleet_child" 2>&1)
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a wrong-token sandbox was not refused (exit $rc)"
echo "$out" | grep -q "bad or missing token" ||
	fail "the refusal does not name the token: $out"
h=$(ls "$T/d/cache/blobs" | grep '^[0-9a-f]\{64\}$' | head -n 1)
out=$(fleet_on d "$BIN/kc-blob-fetch" --home "$T/e" "$h" 2>&1) &&
	fail "a wrong-token blob fetch succeeded: $out"
echo "$out" | grep -q "bad or missing token" ||
	fail "the blob refusal does not name the token: $out"
[ -e "$T/e/cache/blobs/$h" ] && fail "a refused fetch left a blob"
out=$(fleet_on d "$BIN/kc-blob-fetch" --home "$T/d" --fresh "$h" 2>&1) ||
	fail "the right token's fetch failed: $out"
echo "ok: wrong-token worker and blob fetch refused ($out)"
echo "PASS in $(($(date +%s) - start)) s"
