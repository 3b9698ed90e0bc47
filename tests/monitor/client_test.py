"""The Python client (tools/python/kclaw_client.py) against real kclawd.

    python3 client_test.py LIVE_URL DONE_TASK LIVE_HOME TOKEN_URL TOKEN SRC BIN

LIVE_URL serves a deployment with a finished task (live_env.sh, no token);
TOKEN_URL a kclawd with a token and no workers, where a submitted task
waits in seeding until it is cancelled.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading

live, task, live_home, turl, token, src, bindir = sys.argv[1:8]
sys.path.insert(0, os.path.join(src, "tools", "python"))
import kclaw_client  # noqa: E402
from kclaw_client import Client, NotFound, Unauthorized, BadRequest, Unreachable  # noqa: E402


def expect_raises(cls, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except cls as e:
        return e
    raise AssertionError("%s did not raise %s" % (fn.__name__, cls.__name__))


# --- A finished task: result, its files, report, events.
c = Client(live)
assert c.health()["version"], "health"
rec = c.status(task)
assert rec["state"] == "done", rec["state"]
assert rec["speedup"] is None or rec["speedup"] > 0
res = c.result(task)
assert res["best"]["candidate"]["source"], "no best source"
assert any(t["id"] == task for t in c.tasks(state="done"))
with tempfile.TemporaryDirectory() as d:
    names = sorted(c.download(task, os.path.join(d, "http")))
    subprocess.run([os.path.join(bindir, "kclaw"), "--home", live_home, "result", task,
                    "--out", os.path.join(d, "cli")], check=True, stdout=subprocess.DEVNULL)
    cli = sorted(os.listdir(os.path.join(d, "cli")))
    assert names == cli, (names, cli)
    for n in names:
        a = open(os.path.join(d, "http", n), "rb").read()
        b = open(os.path.join(d, "cli", n), "rb").read()
        assert a == b, "%s differs from kclaw result --out's" % n
assert c.result_file(task, "model_new.py").startswith(b"")
rep = c.report([task])
cli_rep = json.loads(subprocess.run(
    [os.path.join(bindir, "kclaw"), "--home", live_home, "report", task, "--json"],
    check=True, capture_output=True).stdout)
assert rep == cli_rep, "the report differs from kclaw report --json"
evs = list(c.events(0, task=task, follow=False))
kinds = [e["kind"] for e in evs]
assert kinds[0] == "task_submitted" and "task_finished" in kinds, kinds
assert all(k == k.lower() for k in kinds)
seqs = [e["seq"] for e in evs]
assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
# The stream from the middle gives the rest, in order, then stays open.
mid = seqs[len(seqs) // 2]
streamed = [e["seq"] for e in c.events(mid, task=task, follow=True, timeout=2)]
assert streamed == [s for s in seqs if s > mid], (streamed, seqs)
# wait on a finished task returns its record at once.
assert c.wait(task)["state"] == "done"
e = expect_raises(NotFound, c.status, "nosuchtask")
assert e.code == "not_found" and e.exit == 3 and e.status == 404, vars(e)
expect_raises(NotFound, c.result_file, task, "nosuch.txt")
expect_raises(BadRequest, c.status, "bad/id")
expect_raises(Unreachable, Client("http://127.0.0.1:1").health)

# --- With a token: refused without it; submit, follow, cancel, wait.
expect_raises(Unauthorized, Client(turl, token="").health)
expect_raises(Unauthorized, Client(turl, token="wrong").tasks)
expect_raises(Unauthorized, Client(turl, token="").submit,
              os.path.join(src, "examples", "softmax_rows"))
t = Client(turl, token=token)
tid = t.submit(os.path.join(src, "examples", "softmax_rows"), task_id="client_t1")
assert tid == "client_t1", tid
# The same bundle under the same id again: the same task.
assert t.submit(os.path.join(src, "examples", "softmax_rows"), task_id="client_t1") == tid
assert t.status(tid)["spec"]["name"] == "softmax_rows"
seen = []
ready = threading.Event()


def progress(ev):
    seen.append(ev["kind"])
    if ev["kind"] == "state_changed":
        ready.set()


def canceller():
    ready.wait(20)
    t.cancel(tid)


th = threading.Thread(target=canceller)
th.start()
final = t.wait(tid, progress=progress, timeout=30)
th.join()
assert final["state"] == "cancelled", final["state"]
assert seen[0] == "task_submitted" and "task_cancelled" in seen, seen
# A bundle that does not load is refused with its reason.
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "task.json"), "w").write('{"name": "x"')
    e = expect_raises(BadRequest, t.submit, d)
    assert "task.json" in e.message, e.message
# A tensors bundle: its .npy files go up by content (PutBlob) and the
# stored spec names them by hash.
with tempfile.TemporaryDirectory() as d:
    subprocess.run([sys.executable, os.path.join(src, "tests", "cli", "mknpy.py"), d], check=True)
    open(os.path.join(d, "task.json"), "w").write(json.dumps({
        "name": "double", "tensors": [
            {"name": "x", "kind": "input", "dtype": "f32", "shape": [4]},
            {"name": "y", "kind": "output", "dtype": "f32", "shape": [4]}],
        "tolerance": {"atol": 1e-6, "rtol": 1e-5, "max_rel_norm": 1e-5},
        "reference": {"kind": "tensors", "baseline_ms": 1.0, "sets": [
            {"seed": 1, "inputs": {"x": "x.npy"}, "expected": {"y": "y.npy"}}]}}))
    tb = t.submit(d)
    ref = t.result(tb)["task"]["spec"]["reference"]
    x = ref["sets"][0]["inputs"][0]
    import hashlib
    assert x["blob"] == hashlib.sha256(open(os.path.join(d, "x.npy"), "rb").read()).hexdigest(), x
    assert x["path"] is None, x
    t.cancel(tb)
print("client test ok:", len(evs), "events,", len(names), "files")
