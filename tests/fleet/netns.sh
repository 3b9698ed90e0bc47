# netns.sh - hosts as network namespaces, for the multi-host test and its
# benchmark (sourced). Each host is a namespace with one veth link to a
# bridge in a "switch" namespace; nothing is shared between hosts but that
# network (each process gets its own home folder).
#
#   fleet_probe           exit 77 with a SKIP line unless we may do this
#   fleet_net a b c d     hosts a b c ... at 10.77.0.1, .2, .3, ...
#   fleet_ip HOST         the host's address
#   fleet_on HOST CMD...  runs CMD on HOST
#   fleet_cut HOST        takes the host's link down (its peers see silence)
#   fleet_clean           kills what fleet_bg started, removes the namespaces
FLEET_NS=kcf$$
FLEET_HOSTS=""
FLEET_PIDS=""

fleet_probe() {
	if [ "$(id -u)" != 0 ]; then
		echo "SKIP: network namespaces need root (CAP_NET_ADMIN); run as root or in CI"
		exit 77
	fi
	if ! command -v ip >/dev/null 2>&1; then
		echo "SKIP: no 'ip' command (install iproute2: tools/install-deps.sh)"
		exit 77
	fi
	if ! ip netns add "${FLEET_NS}probe" 2>/dev/null; then
		echo "SKIP: cannot create a network namespace here (no CAP_SYS_ADMIN, or a restricted container)"
		exit 77
	fi
	ip netns del "${FLEET_NS}probe"
}

fleet_net() {
	n=0
	ip netns add "${FLEET_NS}sw" || return 1
	ip -n "${FLEET_NS}sw" link add br0 type bridge || return 1
	ip -n "${FLEET_NS}sw" link set br0 up || return 1
	for h in "$@"; do
		n=$((n + 1))
		ns="${FLEET_NS}$h"
		ip netns add "$ns" || return 1
		ip link add "${ns}" type veth peer name "${ns}p" || return 1
		ip link set "${ns}p" netns "${FLEET_NS}sw" || return 1
		ip link set "${ns}" netns "$ns" || return 1
		ip -n "$ns" link set lo up || return 1
		ip -n "$ns" addr add "10.77.0.$n/24" dev "$ns" || return 1
		ip -n "$ns" link set "$ns" up || return 1
		ip -n "${FLEET_NS}sw" link set "${ns}p" master br0 up || return 1
		FLEET_HOSTS="$FLEET_HOSTS $h"
		eval "FLEET_IP_$h=10.77.0.$n"
	done
}

fleet_ip() { eval "echo \$FLEET_IP_$1"; }

fleet_on() {
	h=$1
	shift
	ip netns exec "${FLEET_NS}$h" "$@"
}

# fleet_bg HOST LOG CMD...: in the background; its pid in $FLEET_LAST.
fleet_bg() {
	h=$1
	log=$2
	shift 2
	ip netns exec "${FLEET_NS}$h" "$@" >>"$log" 2>&1 &
	FLEET_LAST=$!
	FLEET_PIDS="$FLEET_PIDS $FLEET_LAST"
}

fleet_cut() { ip -n "${FLEET_NS}sw" link set "${FLEET_NS}$1p" down; }

fleet_clean() {
	for p in $FLEET_PIDS; do kill -TERM "$p" 2>/dev/null; done
	sleep 0.3
	for p in $FLEET_PIDS; do kill -KILL "$p" 2>/dev/null; done
	for p in $FLEET_PIDS; do wait "$p" 2>/dev/null; done
	for h in $FLEET_HOSTS; do ip netns del "${FLEET_NS}$h" 2>/dev/null; done
	ip netns del "${FLEET_NS}sw" 2>/dev/null
	FLEET_PIDS=""
	FLEET_HOSTS=""
}

# fleet_home DIR ORCH_IP TOKEN [ORCH_JSON]: a host's own kclaw.json.
fleet_home() {
	mkdir -p "$1"
	chmod 700 "$1"
	cat >"$1/kclaw.json" <<JSON
{"api_url": "tcp://$2:18460", "work_url": "tcp://$2:18461",
 "token": "$3", "orchestrator": {${4:-}}}
JSON
	chmod 600 "$1/kclaw.json"
}

# fleet_state HOST HOME ID: the task's state, asked over the network.
fleet_state() {
	fleet_on "$1" "$BIN/kclaw" --home "$2" status "$3" --json 2>/dev/null |
		python3 -c 'import json,sys; print((json.load(sys.stdin)["state"] or "").upper())' 2>/dev/null
}

# fleet_bundle DIR NAME ELEMS SEED [cuda]: a task bundle whose context
# scripts the test-double agents; a `tensors` reference with two input
# sets of ELEMS f32 each (.npy files, content from SEED), or a `cuda` one.
# $FLEET_EVAL_TIMEOUT_S, when set, is the task's evaluation deadline.
fleet_bundle() {
	python3 - "$@" <<'PY'
import array, json, os, struct, sys
d, name, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
kind = sys.argv[5] if len(sys.argv) > 5 else "tensors"
os.makedirs(d, exist_ok=True)
def npy(path, vals):
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % n
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(os.path.join(d, path), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        vals.tofile(f)
t = {"name": name, "tensors": [
    {"name": "x", "kind": "input", "dtype": "f32", "shape": [n]},
    {"name": "y", "kind": "output", "dtype": "f32", "shape": [n]}],
    "tolerance": {"atol": 1e-5, "rtol": 1e-5, "max_rel_norm": 1e-5},
    "budget": {"rounds": 1}, "context": "script.txt"}
if os.environ.get("FLEET_EVAL_TIMEOUT_S"):
    t["params"] = {"eval_timeout_s": int(os.environ["FLEET_EVAL_TIMEOUT_S"])}
if kind == "cuda":
    t["tensors"][0]["init"] = {"dist": "normal", "mean": 0, "scale": 1}
    t["reference"] = {"kind": "cuda", "source": "ref.cu", "plan": "ref.plan.json"}
    open(os.path.join(d, "ref.cu"), "w").write('extern "C" __global__ void copy(const float *x, float *y) { y[threadIdx.x] = x[threadIdx.x]; }\n')
    open(os.path.join(d, "ref.plan.json"), "w").write('{"steps": [{"kernel": "copy", "grid": [1,1,1], "block": [256,1,1], "args": ["x", "y"]}]}')
else:
    sets = []
    for s in range(2):
        os.makedirs(os.path.join(d, "set%d" % s), exist_ok=True)
        base = seed * 131 + s * 17
        x = array.array("f", [float((i * 7 + base) % 100003) for i in range(1024)]) * (n // 1024)
        npy("set%d/x.npy" % s, x)
        npy("set%d/y.npy" % s, array.array("f", [v * 2 for v in x[:1024]]) * (n // 1024))
        sets.append({"seed": s + 1, "inputs": {"x": "set%d/x.npy" % s},
                     "expected": {"y": "set%d/y.npy" % s}})
    t["reference"] = {"kind": "tensors", "baseline_ms": 4.0, "sets": sets}
open(os.path.join(d, "script.txt"), "w").write("seeds=ok:2.0;opt=1.0;ref=4.0")
json.dump(t, open(os.path.join(d, "task.json"), "w"), indent=1)
PY
}
