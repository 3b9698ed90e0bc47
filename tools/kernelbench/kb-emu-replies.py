#!/usr/bin/env python3
"""Replies for the provider emulator's model-like mode (tests/agents/
llm_server.py) that let `kclaw kernelbench` run a KernelBench subset with
the hand-written kernels of tests/gpu/kernelbench: a scripted model, not a
model. For every case whose `expect` names a problem, the task
(kb2bundle's name for it, e.g. L1_19_ReLU) gets, for every job number up to
--jobs, the case's kernel and plan as the Generator's seed, the Optimizer's
and the Repairer's candidate, a Planner plan, a Feature Extractor answer
and a diagnosis. Prints the problems covered, one per line (level1/19_ReLU.py).

    kb-emu-replies.py CASES_DIR OUT_DIR [--jobs 40] [--only relu,softmax]
"""
import argparse
import json
import os
import re


def task_name(problem):
    level = re.match(r"level(\d+)/", problem)
    stem = os.path.splitext(os.path.basename(problem))[0]
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem).lstrip(".") or "problem"
    return "L%s_%s" % (level.group(1), stem) if level else stem


def candidate(intro, kernel, plan):
    return "%s\n\n```cuda\n%s\n```\n```json\n%s\n```\n" % (intro, kernel.strip(), plan.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("out")
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    features = {"features": [{"name": "memory_bound", "value": 1,
                              "note": "scripted: the hand-written kernel streams its data"}]}
    plan = {"method": "vectorized_access",
            "steps": ["1. Keep the hand-written kernel (a scripted reply)."],
            "rationale": "A scripted run: the reply is fixed.",
            "expected_effect": "None; the same kernel again."}
    diagnosis = {"category": "wrong_result", "root_cause": "scripted reply",
                 "fix": "the hand-written kernel again"}
    for case in sorted(os.listdir(a.cases)):
        d = os.path.join(a.cases, case)
        exp = os.path.join(d, "expect")
        if (only and case not in only) or not os.path.isfile(exp):
            continue
        fields = dict(l.split(" ", 1) for l in open(exp).read().splitlines() if " " in l)
        if fields.get("status", "").strip() != "OK" or "problem" not in fields:
            continue
        problem = fields["problem"].strip()
        kernel = open(os.path.join(d, "kernel.cu")).read()
        plan_json = open(os.path.join(d, "plan.json")).read()
        replies = {
            "generator": candidate("One seed.\n\n### Candidate 1: the hand-written kernel.",
                                   kernel, plan_json),
            "optimizer": candidate("The plan applied to the base kernel.", kernel, plan_json),
            "repairer": candidate("The fix applied, nothing else changed.", kernel, plan_json),
            "planner": "```json\n%s\n```\n" % json.dumps(plan, indent=1),
            "feature": "```json\n%s\n```\n" % json.dumps(features, indent=1),
            "diagnoser": "```json\n%s\n```\n" % json.dumps(diagnosis, indent=1),
        }
        for role, text in replies.items():
            rd = os.path.join(a.out, task_name(problem), role)
            os.makedirs(rd, exist_ok=True)
            for n in range(a.jobs):
                with open(os.path.join(rd, "%d.txt" % n), "w") as f:
                    f.write(text)
        print(problem)


if __name__ == "__main__":
    main()
