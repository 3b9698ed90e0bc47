#!/usr/bin/env python3
"""The live main job's script and checks (tests/mainjob/live_test.sh).

    live.py script URL RECORDINGS     put the provider emulator
                                      (tests/agents/llm_server.py) in its
                                      model-like mode: every agent of every
                                      task gets the reply the recordings
                                      hold for its job, with the faults
                                      below on the way
    live.py check REPORT EXPECT SERVED REC PRICES KEY
                                      the live run: every task DONE with
                                      the recordings' figures, every fault
                                      served and got past, no request
                                      unscripted, the report's tokens the
                                      emulator's usage summed (and the cost
                                      at PRICES where the report prices),
                                      the recording complete and free of
                                      the API key
    live.py same LIVE REPLAY          two reports equal but for task ids
    live.py replies EVENTS            a task's agent replies and
                                      evaluations (kclaw watch --json
                                      lines), task ids left out, in a
                                      canonical order: what a replay of the
                                      task must repeat byte for byte
"""

import glob
import json
import os
import sys
import urllib.request

# One fault per task (and two more), each of the kind a real endpoint or
# model gives: the agents must get past every one without a failed job.
FAULTS = [
    {"name": "rate_limited", "task": "bias_gelu", "role": "planner",
     "job": 0, "action": {"status": 429, "headers": {"Retry-After": "1"},
                          "error": "Rate limit reached; retry after 1s"}},
    {"name": "overloaded", "task": "bias_gelu", "role": "generator",
     "job": 1, "action": {"status": 503, "error": "overloaded"}},
    {"name": "malformed", "task": "softmax_rows", "role": "diagnoser",
     "job": 0, "action": {"content": "The reduction is wrong: "
                          "__shfl_down_sync leaves the sum in lane 0 only, "
                          "so broadcast it before normalising."}},
    {"name": "reasoning_content", "task": "softmax_rows",
     "role": "planner", "job": 1, "action": {
         "reasoning_content": "Two passes over the row remain; fuse the "
         "max and the sum."}},
    {"name": "truncated", "task": "layernorm", "role": "optimizer",
     "job": 0, "action": {"truncate": 0.5}},
    {"name": "think", "task": "sum_reduce", "role": "feature", "job": 0,
     "action": {"think": "A draft first:\n```json\n{\"features\": "
                "[{\"name\": \"is_matmul\", \"value\": 1}]}\n```\nNo: it "
                "is a reduction.", "open": True}},
    {"name": "think_unopened", "task": "matmul_bias_relu",
     "role": "generator", "job": 0, "action": {
         "think": "Draft:\n```cuda\nextern \"C\" __global__ void draft("
         "float *y) { y[threadIdx.w] = 0; }\n```\nThat does not compile; "
         "write the real one.", "open": False}},
    {"name": "cut_body", "task": "conv2d_5x5", "role": "repairer",
     "job": 0, "action": {"raw": "{\"choices\": [{\"message\": "
                          "{\"content\": \"```cu", "status": 200}},
]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def cmd_script(url, recordings):
    body = json.dumps({"actions": [], "model": {
        "recordings": os.path.abspath(recordings),
        "faults": FAULTS}}).encode()
    req = urllib.request.Request(url + "/_script", data=body, method="POST")
    urllib.request.urlopen(req, timeout=10).read()


def usage_of(served):
    """The emulator's usage summed per task."""
    tot = {}
    for s in served:
        t = tot.setdefault(s["task"], {"prompt": 0, "completion": 0,
                                       "reasoning": 0, "cached": 0})
        t["prompt"] += s["prompt_tokens"]
        t["completion"] += s["completion_tokens"]
        t["reasoning"] += s["reasoning_tokens"]
        t["cached"] += s["cached_tokens"]
    return tot


def close(a, b):
    return a is not None and abs(a - b) <= 1e-9 + 1e-6 * abs(b)


def cmd_check(report_path, expect_path, served_path, rec, prices_path,
              key):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import mainjob
    mainjob.cmd_report(report_path, expect_path)
    rep = json.load(open(report_path))
    served = json.load(open(served_path))["served"]
    bad = [s for s in served if s["status"] == 500]
    if bad:
        fail("requests the script does not answer: %s" % bad[:3])
    seen = {s["fault"] for s in served if s["fault"]}
    want = {f["name"] for f in FAULTS}
    if seen != want:
        fail("faults served %s, expected %s" % (sorted(seen), sorted(want)))
    # Each fault was followed by an answer to the same job.
    for f in FAULTS:
        tries = [s for s in served if (s["task"], s["role"], s["job"]) ==
                 (f["task"], f["role"], f["job"])]
        if "think" in f["action"] or "reasoning_content" in f["action"]:
            if len(tries) != 1:
                fail("%s: %d requests, expected 1" % (f["name"], len(tries)))
        elif len(tries) != 2 or tries[1]["fault"]:
            fail("%s: the job was not asked again once: %s" % (
                f["name"], tries))
    tot = usage_of(served)
    prices = json.load(open(prices_path))["prices"]
    price = list(prices.values())[0]
    n_priced = 0
    total_tokens = 0
    for t in rep["tasks"]:
        u = tot[t["name"]]
        want = u["prompt"] + u["completion"]
        total_tokens += want
        if t["tokens"] != want or want == 0:
            fail("%s: %s tokens in the report, the emulator's usage sums "
                 "to %d" % (t["name"], t["tokens"], want))
        if t.get("cost_usd") is not None:
            cost = ((u["prompt"] - u["cached"]) * price["prompt"] +
                    u["cached"] * price["cached_prompt"] +
                    (u["completion"] - u["reasoning"]) * price["completion"]
                    + u["reasoning"] * price["reasoning"]) / 1e6
            if not close(t["cost_usd"], cost):
                fail("%s: cost %s USD, expected %s" % (
                    t["name"], t["cost_usd"], cost))
            n_priced += 1
    print("live ok: %d requests, %d faults got past, %d tokens, %s" % (
        len(served), len(FAULTS), total_tokens,
        "cost checked for %d task(s)" % n_priced if n_priced else
        "no cost in the report"))
    # The recording: every job's exchange, its re-asks, the task list.
    files = sorted(os.path.relpath(p, rec) for p in
                   glob.glob(os.path.join(rec, "**", "*.json"),
                             recursive=True))
    for name in ("main.json", "softmax_rows/diagnoser/0.reask1.json",
                 "layernorm/optimizer/0.reask1.json",
                 "bias_gelu/planner/0.json",
                 "conv2d_5x5/repairer/0.json"):
        if name not in files:
            fail("the recording lacks %s" % name)
    answers = [s for s in served if s["status"] == 200 and
               s["fault"] not in ("cut_body",)]
    if len(files) - 1 != len(answers):
        fail("%d exchanges recorded, the emulator answered %d" % (
            len(files) - 1, len(answers)))
    man = json.load(open(os.path.join(rec, "main.json")))
    ship = json.load(open(os.path.join(os.environ["KCLAW_SRC"], "examples",
                                       "recordings", "main.json")))
    if [(t["bundle"], t["rounds"]) for t in man["tasks"]] != \
            [(t["bundle"], t["rounds"]) for t in ship["tasks"]]:
        fail("main.json of the recording: %s" % man["tasks"])
    for p in files:
        text = open(os.path.join(rec, p)).read()
        if key in text:
            fail("the API key is in the recording %s" % p)
        json.loads(text)
    print("recording ok: %d exchanges" % (len(files) - 1))


def strip_ids(rep):
    """The report without task ids and wall-clock times, which no replay
    repeats."""
    for t in rep["tasks"]:
        t.pop("id", None)
        t.pop("wall_s", None)
    for s in [rep["set"]] + rep.get("levels", []):
        s.pop("wall_s", None)
        s.pop("task_wall_s", None)
    return rep


def cmd_same(a, b):
    ra, rb = strip_ids(json.load(open(a))), strip_ids(json.load(open(b)))
    if ra != rb:
        fail("the replay's report differs:\n%s\n%s" % (
            json.dumps(ra, sort_keys=True), json.dumps(rb, sort_keys=True)))
    print("replay report identical: %d tasks" % len(ra["tasks"]))


def cmd_replies(events_path):
    """Agent replies in job order per role (the Generator's concurrent jobs
    sorted) and evaluations sorted; task ids removed."""
    out = []
    for line in open(events_path):
        if not line.strip():
            continue
        ev = json.loads(line)
        if ev.get("kind") not in ("agent_replied", "eval_finished"):
            continue
        cand = (ev.get("candidate_id") or "").rsplit("-", 1)[-1]
        out.append("%s %s %s %s" % (ev["kind"], ev.get("role", ""), cand,
                                    ev.get("detail", "")))
    for line in sorted(out):
        print(line)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {"script": cmd_script, "check": cmd_check, "same": cmd_same,
     "replies": cmd_replies}[cmd](*args)


if __name__ == "__main__":
    main()
