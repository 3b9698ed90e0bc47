#!/bin/sh
# Issue 27: a peer that hangs up during the connection handshake loses
# NNG 1.5.2's ipc:// listener for good (nanomsg/nng#1518), so kclaw's
# accept gate stands in front of every listener. Against a deployment
# started the way a user starts it (`kclaw up --detach`, test-double
# agents and sandboxes), hang up on every listener in run/ in every way a
# dying client can (connect and close; part of the SP header; the whole
# header, unread; a request cut off), several rounds, then: the API
# answers, a task's jobs reach the workers and the task finishes, and
# Health says every listener is well.
set -u
K="$KCLAW_BIN/kclaw"
H=$(mktemp -d /tmp/kc-hangup-XXXXXX)
export KCLAW_AGENT_BIN="$KCLAW_BIN/kc-double"
export KCLAW_SANDBOX_BIN="$KCLAW_BIN/kc-double"
unset KCLAW_HOME KCLAW_TOKEN KCLAW_API_URL KCLAW_WORK_URL KCLAW_EVENTS_URL
cleanup() { "$K" --home "$H" up --stop >/dev/null 2>&1; rm -rf "$H"; }
fail() {
	echo "FAIL: $*" >&2
	tail -n 20 "$H"/run/*.log >&2
	cleanup
	exit 1
}

"$K" --home "$H" up --detach --gpus 1 >/dev/null || fail "up --detach"
i=0
until "$K" --home "$H" status >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -gt 100 ] && fail "no orchestrator answered"; sleep 0.1
done

# Every public socket in run/ (the gate's private ones are dot files).
socks=$(ls "$H"/run/*.ipc 2>/dev/null)
[ -n "$socks" ] || fail "no ipc:// listener in $H/run"
for s in api work events; do
	[ -S "$H/run/$s.ipc" ] || fail "no $s.ipc listener"
done

hangup() {
	python3 - "$@" <<'PY'
import socket, sys, time
rounds = int(sys.argv[1])
for r in range(rounds):
    for path in sys.argv[2:]:
        # A SUB on the events socket, a REQ everywhere else.
        proto = 0x21 if path.endswith("events.ipc") else 0x30
        hello = bytes([0, ord("S"), ord("P"), 0, 0, proto, 0, 0])
        for way in range(5):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            if way == 1:
                s.send(hello[:3])
            elif way == 2:
                s.send(hello)
            elif way == 3:
                s.send(hello)
                s.settimeout(2)
                s.recv(8)
                # A request frame cut off after its size.
                s.send(bytes([1, 0, 0, 0, 0, 0, 0, 0, 40]) + b"\x80\x00")
            elif way == 4:
                # A reset instead of a close.
                import struct
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             struct.pack("ii", 1, 0))
                s.send(hello)
            s.close()
PY
}
hangup 5 $socks || fail "could not hang up on $socks"

# Served: the API answers at once, and Health names every listener well.
"$K" --home "$H" status >/dev/null || fail "status after the hang-ups"
"$K" --home "$H" status --json | python3 -c '
import json, sys
h = json.load(sys.stdin)["health"]
ls = h.get("listeners", [])
assert len(ls) >= 3, ls
for l in ls:
    assert l.get("healthy") is True, l
' || fail "Health does not report every listener well: $("$K" --home "$H" status --json)"

# A task: its jobs must reach the agents and the sandbox.
B="$H/bundle"
mkdir -p "$B"
cat >"$B/task.json" <<'JSON'
{"name": "hangup_copy", "tensors": [
  {"name": "x", "kind": "input", "dtype": "f32", "shape": [256],
   "init": {"dist": "normal", "mean": 0, "scale": 1}},
  {"name": "y", "kind": "output", "dtype": "f32", "shape": [256]}],
 "tolerance": {"atol": 1e-5, "rtol": 1e-5, "max_rel_norm": 1e-5},
 "budget": {"rounds": 2},
 "reference": {"kind": "cuda", "source": "ref.cu", "plan": "ref.plan.json"},
 "context": "script.txt"}
JSON
echo 'extern "C" __global__ void copy(const float *x, float *y) { y[threadIdx.x] = x[threadIdx.x]; }' >"$B/ref.cu"
echo '{"steps": [{"kernel": "copy", "grid": [1,1,1], "block": [256,1,1], "args": ["x", "y"]}]}' >"$B/ref.plan.json"
printf 'seeds=ok:2.0;opt=1.0;ref=4.0' >"$B/script.txt"
id=$("$K" --home "$H" submit "$B") || fail "submit after the hang-ups"
# More hang-ups while the task runs.
hangup 2 $socks || fail "could not hang up while the task ran"
timeout 60 "$K" --home "$H" watch "$id" >"$H/watch.txt" ||
	fail "watch: $(tail -n 5 "$H/watch.txt")"
grep -q "TASK_FINISHED" "$H/watch.txt" || fail "the task did not finish"
grep -q "AGENT_REPLIED" "$H/watch.txt" || fail "no agent's job came through"
grep -q "EVAL_FINISHED" "$H/watch.txt" || fail "no sandbox's job came through"
# Exit codes and unmeasured figures (issue 27, item 4).
"$K" --home "$H" memory short-term no-such-task >/dev/null 2>&1
[ $? -eq 3 ] || fail "memory short-term of an unknown task must exit 3"
"$K" --home "$H" status "$id" | grep -q "0\.0000 ms" &&
	fail "status prints 0.0000 ms for a figure never measured"
cleanup
echo "hangup ok"
