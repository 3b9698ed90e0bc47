#!/usr/bin/env python3
"""A stand-in for kb2bundle's batch converter where PyTorch is missing (CI):
the test double at the process boundary of `kclaw kernelbench`. It speaks
kb2bundle.batch()'s protocol (JSON lines; docs/kernelbench.md "The
converter") and writes real `torch` bundles with kb2bundle's own torch-free
writer, declaring every problem as x (input, f32 [1024]) -> out (output,
f32 [1024]); the problem's source becomes model.py and the agents' context,
so a scripted worker (tests/orchestrator/double.c) reads its script there.

    python3 kb_convert_standin.py --batch

A problem whose source holds "standin: broken" is refused, as kb2bundle
refuses one it cannot convert. Environment:
  KB_STANDIN_LOG    a file each conversion asked for is appended to (its
                    file name), so a test sees what was converted
  KB_STANDIN_HOLD   a problem file name (e.g. 1_Delta.py): when asked for
                    it, the stand-in creates KB_STANDIN_HOLD_FILE and waits
                    until its input ends (a test kills kclaw meanwhile)
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "kernelbench"))
import kb2bundle  # noqa: E402


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def convert(problem, dest):
    with open(problem) as f:
        source = f.read()
    if "standin: broken" in source:
        raise kb2bundle.BridgeError("forward returned NoneType; kclaw compares tensors, so "
                                    "return a tensor or a tuple of tensors")
    tensors = [kb2bundle.Tensor("x", "input", "f32", [1024], "x"),
               kb2bundle.Tensor("out", "output", "f32", [1024], "out")]
    tmp = "%s.tmp.%d" % (dest.rstrip("/"), os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    kb2bundle.write_torch_bundle(tmp, kb2bundle.task_name(problem), "scripted problem",
                                 source, tensors, provenance={"standin": True})
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.rename(tmp, dest)
    return os.path.join(dest, "task.json")


def main():
    if sys.argv[1:] != ["--batch"]:
        sys.exit("usage: kb_convert_standin.py --batch")
    emit({"ready": True, "torch": "standin", "python": sys.executable, "import_s": 0})
    log = os.environ.get("KB_STANDIN_LOG")
    hold = os.environ.get("KB_STANDIN_HOLD")
    for line in sys.stdin:
        req = json.loads(line)
        name = os.path.basename(req["problem"])
        if log:
            with open(log, "a") as f:
                f.write(name + "\n")
        if hold and name == hold:
            open(os.environ["KB_STANDIN_HOLD_FILE"], "w").close()
            sys.stdin.read()  # until kclaw is gone
            return 0
        try:
            emit({"problem": req["problem"], "ok": True,
                  "task_json": convert(req["problem"], req["out"]), "ms": 1})
        except kb2bundle.BridgeError as e:
            emit({"problem": req["problem"], "ok": False, "error": str(e)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
