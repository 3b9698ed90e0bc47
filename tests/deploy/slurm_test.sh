#!/bin/sh
# deploy/slurm/kclaw-sandboxes.sbatch: bash -n, shellcheck (when present),
# its refusals, --dry-run's commands for a fake allocation, and one real
# node run: against a kclawd on tcp://127.0.0.1 with a token, two sandboxes
# (no GPU here: they answer NO_DEVICE but pull work) that kclawd sees
# waiting, stopped by SIGTERM with no sandbox left behind.
set -u
SRC=${KCLAW_SRC:?}
BIN=${KCLAW_BIN:?}
S=$SRC/deploy/slurm/kclaw-sandboxes.sbatch
T=$(mktemp -d)
kpid=""
cleanup() {
	[ -n "$kpid" ] && kill "$kpid" 2>/dev/null && wait "$kpid" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
fails=0
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

bash -n "$S" && echo "ok   bash -n" || bad "bash -n"
if command -v shellcheck >/dev/null 2>&1; then
	shellcheck -s bash "$S" && echo "ok   shellcheck $(shellcheck --version | sed -n 's/^version: //p')" || bad "shellcheck"
else
	echo "note shellcheck not found (apt-get install shellcheck): not run"
fi

# Refusals, each with a clear message and exit 2.
env -u KCLAW_WORK_URL bash "$S" --dry-run >/dev/null 2>"$T/e1"
[ $? -eq 2 ] && grep -q "KCLAW_WORK_URL is not set" "$T/e1" || bad "no KCLAW_WORK_URL: $(cat "$T/e1")"
env -u KCLAW_TOKEN -u KCLAW_TOKEN_FILE KCLAW_WORK_URL=tcp://127.0.0.1:1 bash "$S" --dry-run >/dev/null 2>"$T/e2"
[ $? -eq 2 ] && grep -q "needs the deployment's token" "$T/e2" || bad "tcp:// without a token: $(cat "$T/e2")"
env -u SLURM_JOB_ID KCLAW_WORK_URL=tcp://127.0.0.1:1 KCLAW_TOKEN=x bash "$S" >/dev/null 2>"$T/e3"
[ $? -eq 2 ] && grep -q "not inside a Slurm job" "$T/e3" || bad "outside a job: $(cat "$T/e3")"
bash "$S" --bogus >/dev/null 2>&1
[ $? -eq 2 ] || bad "--bogus not refused"

# Dry run: one sandbox per allocated GPU, numbered 0..n-1 inside the step.
echo tok-from-file >"$T/token"
chmod 600 "$T/token"
env -u SLURM_JOB_ID -u KCLAW_TOKEN KCLAW_TOKEN_FILE="$T/token" KCLAW_WORK_URL=tcp://127.0.0.1:8461 \
	KCLAW_EVENTS_URL=tcp://127.0.0.1:8462 CUDA_VISIBLE_DEVICES=2,3,5 KCLAW_NODE_HOME="$T/nh" \
	KCLAW_BIN_DIR=/opt/kclaw/bin bash "$S" --dry-run >"$T/dry" 2>&1 || bad "dry run failed: $(cat "$T/dry")"
h=$(hostname -s)
for i in 0 1 2; do
	g=$(echo 2,3,5 | cut -d, -f$((i + 1)))
	grep -qx "$h gpu $g: /opt/kclaw/bin/kclaw-sandbox --device $i --home $T/nh-$h --work-url tcp://127.0.0.1:8461 --events-url tcp://127.0.0.1:8462" "$T/dry" ||
		bad "dry run lacks GPU $g's command"
done
[ "$(grep -c 'kclaw-sandbox --device' "$T/dry")" -eq 3 ] || bad "dry run: not 3 sandboxes"
grep -q tok-from-file "$T/dry" && bad "dry run prints the token"
[ -e "$T/nh-$h" ] && bad "dry run created the node home"
env -u SLURM_JOB_ID KCLAW_WORK_URL=tcp://127.0.0.1:1 KCLAW_TOKEN=x CUDA_VISIBLE_DEVICES= bash "$S" --dry-run >/dev/null 2>"$T/e4"
grep -q "no GPU allocated" "$T/e4" || bad "no GPU: $(cat "$T/e4")"
[ $fails -eq 0 ] && echo "ok   refusals and --dry-run"

# A real node run against a real kclawd.
port=$(python3 "$SRC/tests/free_port.py" 3)
mkdir "$T/home"
export KCLAW_HOME="$T/home" KCLAW_API_URL=tcp://127.0.0.1:$port KCLAW_WORK_URL=tcp://127.0.0.1:$((port + 1)) \
	KCLAW_EVENTS_URL=tcp://127.0.0.1:$((port + 2)) KCLAW_TOKEN=slurm-test-token
(cd "$T/home" && exec "$BIN/kclawd" --home "$T/home") >"$T/kclawd.log" 2>&1 &
kpid=$!
i=0
until "$BIN/kclaw" status --json --home "$T/home" >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -gt 100 ] && { bad "kclawd did not answer"; cat "$T/kclawd.log"; exit 1; }
	sleep 0.1
done
env -u KCLAW_HOME KCLAW_NODE_HOME="$T/node" KCLAW_BIN_DIR="$BIN" CUDA_VISIBLE_DEVICES=0,1 \
	bash "$S" --node >"$T/node.log" 2>&1 &
npid=$!
i=0
waiting=0
while [ $i -lt 100 ]; do
	waiting=$("$BIN/kclaw" status --json --home "$T/home" 2>/dev/null | sed -n 's/.*"workers_waiting":\([0-9]*\).*/\1/p')
	[ "${waiting:-0}" -ge 2 ] && break
	i=$((i + 1))
	sleep 0.1
done
[ "${waiting:-0}" -ge 2 ] && echo "ok   two sandboxes of the script wait for work at kclawd" ||
	{ bad "kclawd sees ${waiting:-0} waiting workers, not 2"; cat "$T/node.log"; }
[ "$(stat -c %a "$T/node-$(hostname -s)" 2>/dev/null)" = 700 ] || bad "node home is not 0700"
kill -TERM $npid
i=0
while kill -0 $npid 2>/dev/null && [ $i -lt 100 ]; do
	i=$((i + 1))
	sleep 0.1
done
kill -0 $npid 2>/dev/null && bad "the script did not stop on SIGTERM"
i=0
while pgrep -f -- "--home $T/node" >/dev/null 2>&1 && [ $i -lt 50 ]; do
	i=$((i + 1))
	sleep 0.1
done
if pgrep -f -- "--home $T/node" >/dev/null 2>&1; then
	bad "sandboxes left running after SIGTERM"
	for p in $(pgrep -f -- "--home $T/node"); do kill "$p"; done
else
	echo "ok   SIGTERM stopped the script and its sandboxes"
fi

[ $fails -eq 0 ] && echo "deploy_slurm: all checks passed" || echo "deploy_slurm: $fails failures"
[ $fails -eq 0 ]
