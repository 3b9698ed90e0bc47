#!/bin/sh
# bench.sh - throughput of a fleet across hosts (network namespaces, as in
# netns_test.sh; root only): tasks per second through kclawd on host a,
# test-double agents on host b and SANDBOXES kclaw-sandbox processes with
# the scripted child on hosts c, d, ...; then Blob rpc throughput: every
# blob of the run fetched cold into another host's cache.
#
#   sudo sh tests/fleet/bench.sh [BIN] [TASKS] [SANDBOXES]
#
# BIN defaults to build-rel/bin (a RelWithDebInfo build with the tests'
# programs: fleet_child, kc-double, kc-blob-fetch). Each task is the
# `tensors` task of the test (two sets, 1 MiB per tensor, one round:
# 3 seeds and 1 optimisation evaluated, 5 agent jobs).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "${1:-$SRC/build-rel/bin}" && pwd)
TASKS=${2:-40}
NSBX=${3:-1}
. "$SRC/tests/fleet/netns.sh"
fleet_probe
T=$(mktemp -d /tmp/kc-fleetbench.XXXXXX)
chmod 755 "$T"
trap 'fleet_clean; rm -rf "$T"' EXIT
unset KCLAW_HOME KCLAW_TOKEN KCLAW_API_URL KCLAW_WORK_URL KCLAW_EVENTS_URL || true
hosts="a b"
for i in $(seq "$NSBX"); do hosts="$hosts s$i"; done
hosts="$hosts f"
fleet_net $hosts || { echo "cannot build the network"; exit 1; }
A=$(fleet_ip a)
TOK="bench-$$"
for h in $hosts; do fleet_home "$T/$h" "$A" "$TOK"; done
fleet_bg a "$T/a.log" env KCLAW_LOG=warn "$BIN/kclawd" --home "$T/a"
for i in $(seq 100); do
	fleet_on b "$BIN/kclaw" --home "$T/b" status >/dev/null 2>&1 && break
	sleep 0.1
done
for r in generator feature planner optimizer diagnoser repairer; do
	fleet_bg b "$T/b.log" env KCLAW_LOG=warn "$BIN/kc-double" --role "$r" --home "$T/b"
done
for i in $(seq "$NSBX"); do
	fleet_bg "s$i" "$T/s$i.log" env KCLAW_LOG=warn KCLAW_WORKER_HOST="s$i" \
		FLEET_HOME="$T/s$i" "$BIN/kclaw-sandbox" --home "$T/s$i" \
		--child "$BIN/fleet_child"
done
for i in $(seq "$TASKS"); do
	fleet_bundle "$T/b/bundles/t$i" "t$i" 262144 "$i"
done
for i in 1 2 3 4; do
	fleet_bundle "$T/b/bundles/big$i" "big$i" 2097152 $((1000 + i))
done
# left HOME: tasks not yet ended.
left() {
	fleet_on b "$BIN/kclaw" --home "$T/b" status --json 2>/dev/null |
		python3 -c '
import json, sys
t = json.load(sys.stdin)["tasks"]
print(sum(1 for x in t if (x["state"] or "").upper() not in ("DONE", "FAILED", "CANCELLED")))' 2>/dev/null || echo 1
}
t0=$(date +%s.%N)
# Submitted from host b, 8 clients at a time (a CLI run costs ~0.2 s).
seq "$TASKS" | xargs -P 8 -I N ip netns exec "${FLEET_NS}b" \
	"$BIN/kclaw" --home "$T/b" submit "$T/b/bundles/tN" >>"$T/ids" ||
	{ echo "a submit failed"; exit 1; }
t1=$(date +%s.%N)
while [ "$(left)" -gt 0 ]; do sleep 0.05; done
t2=$(date +%s.%N)
done_n=$(fleet_on b "$BIN/kclaw" --home "$T/b" status --json | python3 -c '
import json, sys
print(sum(1 for x in json.load(sys.stdin)["tasks"] if (x["state"] or "").upper() == "DONE"))')
python3 -c "
t0, t1, t2 = $t0, $t1, $t2
print('tasks: %d of $TASKS DONE with $NSBX sandbox host(s) in %.2f s: %.2f tasks/s (the last submit returned at %.2f s)' % ($done_n, t2 - t0, $done_n / (t2 - t0), t1 - t0))"
# Blob throughput: 4 tasks of 8 MiB tensors (16 blobs, 128 MiB) run, then
# every blob of the run is fetched cold by host f, three times.
for i in 1 2 3 4; do
	fleet_on b "$BIN/kclaw" --home "$T/b" submit "$T/b/bundles/big$i" >/dev/null ||
		{ echo "submit big$i failed"; exit 1; }
done
while [ "$(left)" -gt 0 ]; do sleep 0.1; done
hashes=$(ls "$T/a/run/blobs" | sed -n 's/^\([0-9a-f]\{64\}\)\.npy$/\1/p')
echo "blobs: $(echo "$hashes" | wc -w) in kclawd's store, $(du -sm "$T/a/run/blobs" | cut -f1) MiB"
for i in 1 2 3; do
	fleet_on f "$BIN/kc-blob-fetch" --home "$T/f" --fresh $hashes
done
