#!/usr/bin/env python3
"""bench_torch_eval.py's arithmetic without a GPU (CI): the sample of
problems, an evaluation's parts and overhead from a result's metrics, a
timed run's ratio, and the table from recorded measurements."""
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch_eval as bt  # noqa: E402  (imports no PyTorch)


def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def main():
    check(bt.every_kth(list(range(100)), 25) == list(range(0, 100, 4)), "every 4th of 100")
    check(bt.every_kth(list(range(50)), 6) == [0, 8, 16, 25, 33, 41], "6 of 50")
    check(bt.every_kth([1, 2], 5) == [1, 2], "more than there are")
    check(bt.every_kth([1, 2], 0) == [], "none")
    names = ["10_b.py", "2_a.py", "1_c.py", "x.py"]
    check(sorted(names, key=bt.problem_sort_key) == ["1_c.py", "2_a.py", "10_b.py", "x.py"], "numeric order")

    res = {"wall_ms": 500.0, "timing": {"median_ms": 2.0},
           "metrics": [{"name": "torch.reference_gpu_ms", "value": 100.0},
                       {"name": "sandbox.candidate_runs", "value": 50},
                       {"name": "sandbox.time_ms", "value": 300.0},
                       {"name": "torch.timed_gpu_ms", "value": 120.0},
                       {"name": "torch.timed_inputs", "value": 20}]}
    check(bt.eval_parts_ms(res) == 200.0, "parts: 100 + 50 x 2")
    check(bt.eval_overhead_ms(res) == 300.0, "overhead: 500 - 200")
    t = bt.timed_run_ratio(res)
    check(t["wall_per_run_ms"] == 15.0 and t["parts_per_run_ms"] == 8.0, "per run: %r" % t)
    check(abs(t["ratio"] - 300.0 / 160.0) < 1e-12, "ratio: %r" % t)
    st = bt.eval_steps(dict(res, compile_ms=40.0, metrics=res["metrics"] + [
        {"name": "sandbox.setup_ms", "value": 30.0}, {"name": "sandbox.verify_ms", "value": 70.0},
        {"name": "torch.reference_wait_ms", "value": 130.0}]))
    check(st["compile"] == 40.0 and st["setup"] == 30.0 and st["time"] == 300.0, "steps: %r" % st)
    check(st["other"] == 500.0 - 40 - 30 - 70 - 300 and st["inputs"] == 0.0, "other: %r" % st)
    check(st["reference_host"] == 30.0, "the reference's wait beyond its GPU time: %r" % st)
    check(bt.eval_steps({}) is None, "no wall, no steps")
    check(bt.eval_overhead_ms({"wall_ms": 1.0}) is None, "no metrics, no overhead")
    check(bt.timed_run_ratio({"metrics": []}) is None, "no timed runs, no ratio")

    b = types.SimpleNamespace(records=[], failures=[], summary={"warm_s": {"softmax-2": 1.25}}, t0=0.0)
    b.records += [
        {"part": "cases", "case": "relu", "level": 1, "overhead_ms": 80.0, "timed": t},
        {"part": "cases", "case": "softmax", "level": 1, "overhead_ms": 60.0, "timed": None},
        {"part": "cases", "case": "mlp", "level": 3, "overhead_ms": 140.0, "timed": None},
        {"part": "cases_loaded", "case": "relu", "level": 1, "overhead_ms": 12.0, "timed": None,
         "steps": st},
        {"part": "refonly", "level": 2, "overhead_ms": 90.0},
        {"part": "relu_inprocess", "path": "kernels", "wall_ms": 13.0, "parts_ms": 11.0, "ratio": 1.18},
        {"part": "matched", "speedup": 1.1, "speedup_matched_precision": 0.6},
        {"part": "refonly", "level": 1, "skipped": "budget"},
        {"part": "relu_inprocess", "skipped": "--skip"}]
    text = bt.table(b)
    for want in ("Level 1 (median of 2, ms) | 70.0 | < 100",
                 "Levels 2-3 (median of 1, ms) | 140.0 | < 150",
                 "already loaded, Level 1 (median of 1, ms) | 12.0 | < 100",
                 "already loaded, Levels 2-3 (median of 0, ms) | - | < 150",
                 "reference-only evaluations, Levels 2-3 (median of 1, ms) | 90.0",
                 "15.0 / 8.0 = 1.88x | <= 1.5x",
                 "kernels comparison (ms) | 13.0 / 11.0 = 1.18x",
                 "kclaw eval softmax-2 (s) | 1.25 | < 3",
                 "speedup_matched_precision | 1.10 / 0.60",
                 "| compile | - | 40.0 |",
                 "| other | - | 60.0 |",
                 "9 measurements, 2 skipped, 0 failures"):
        check(want in text, "the table lacks %r:\n%s" % (want, text))
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
