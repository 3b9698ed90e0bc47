#!/usr/bin/env python3
"""Writes the scripted agent replies of the six shipped examples.

    python3 examples/recordings/generate.py [--check]

The replies are the material of examples/*/ (the hand-written candidates,
the broken candidate and its bug.txt), arranged along the state machine of
orchestrator/fsm.c, so that `KCLAW_LLM_REPLAY=examples/recordings` answers
every agent job of the main job. Each reply is a file
<task>/<role>/<n>.txt (docs/agents.md, "Recordings"): the text a model would
have written, nothing else. main.json says how many rounds each task runs:
`kclaw main` sets the task's round budget from it, so a task ends with
"round budget spent" right after its last scripted round.

What every task goes through (docs/mainjob.md has the table):

  generator/0,  the three seeds, one per Generator job (the orchestrator
  generator/1,  sends k = 3 independent jobs, each asking for one seed):
  generator/2   0 is the reference's own kernels (correct, 1.0x), 1 and 2
                fail (a typo that does not compile; for conv2d_5x5, 1 is a
                correct but slower kernel instead), so the best correct
                seed, the reference port, becomes the base;
  feature/n,    for every base, its features; the Planner then chooses a
  planner/n     method that long-term memory allows for those features
                (the static rules: no profile is taken during a task);
  optimizer/n   a hand-written candidate; one of them is the broken
                candidate (an optimisation attempt that verifies wrong), so
                the task goes through a repair:
  diagnoser/0,  the root cause and fix of broken/1/bug.txt, and the repaired
  repairer/0    kernel, which is the candidate bug.txt names.

--check compares the files with what this script would write (a CI test).
"""

import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.dirname(HERE)

# A typo that NVRTC refuses: uint3 has no member w.
TYPO_FROM, TYPO_TO = "threadIdx.x", "threadIdx.w"

FEATURE_NOTES = {
    "is_matmul": "a matrix multiplication or convolution at its core",
    "is_reduction": "reduces many values to few",
    "is_scan": "no prefix sum",
    "is_elementwise": "each output depends on inputs at its own position",
    "strided_access": "neighbouring threads read with a stride",
    "divergent_branches": "threads of a warp take different paths",
    "coalescing": "how well global accesses coalesce",
    "data_reuse": "loaded data reused from registers or shared memory",
    "memory_bound": "limited by DRAM bandwidth rather than arithmetic",
    "arithmetic_intensity": "FLOPs per byte of global traffic",
    "warp_divergence": "paths taken apart inside a warp",
    "bank_conflicts": "shared-memory bank conflicts",
    "parallelism": "independent work to fill the GPU",
    "fusion_opportunity": "steps that could be fused to save traffic",
}

# Per task: the seeds, then the optimisation rounds in order. An optimizer
# entry names the candidate it answers with and the Planner's method and
# steps; "broken" is the attempt that verifies wrong and gets repaired.
TASKS = {
    "bias_gelu": {
        "features": {"is_matmul": 0, "is_reduction": 0, "is_scan": 0,
                     "is_elementwise": 1, "strided_access": 0,
                     "divergent_branches": 0, "coalescing": 0.95,
                     "data_reuse": 0.05, "memory_bound": 0.95,
                     "arithmetic_intensity": 1.2, "warp_divergence": 0,
                     "bank_conflicts": 0, "parallelism": 1,
                     "fusion_opportunity": 0.9},
        "seeds": [("reference", "The reference's three kernels as they "
                   "are: a correct starting point."),
                  ("typo:2", "Fused and vectorized with float4 loads."),
                  ("typo:3", "Fused, vectorized, w and b kept in "
                   "registers across rows.")],
        "rounds": [
            ("candidates/1", "kernel_fusion",
             ["1. Merge scale_cols, shift_cols and gelu into one kernel "
              "bias_gelu: y[i] = gelu_erf(x[i] * w[c] + b[c]) with "
              "c = i % cols.",
              "2. Drop the scratch buffers t and u from the plan.",
              "3. Launch one thread per element: grid 65536, block 256."],
             "Three passes write and re-read 64 MiB of scratch each; one "
             "fused pass moves a third of the bytes.",
             "About 3x less DRAM traffic, so 2-3x faster."),
            ("broken", "vectorized_access",
             ["1. Let each thread handle four consecutive elements with "
              "float4 loads of x, w and b and one float4 store of y.",
              "2. Use the cheaper tanh form of GELU inside the loop.",
              "3. Grid 16384 blocks of 256 threads (cols is a multiple "
              "of 4)."],
             "The fused kernel issues 4-byte accesses; 16-byte accesses "
             "cut the number of memory instructions by four.",
             "Closer to peak DRAM bandwidth, 1.5x or more."),
            ("candidates/3", "grid_stride_loop",
             ["1. Let each block walk 8 consecutive rows for the same "
              "columns.",
              "2. Load the float4 of w and b once per thread and keep them "
              "in registers across the rows.",
              "3. Grid 1024 blocks of 256 threads."],
             "w and b are re-read for every row; walking rows reuses them "
             "from registers and leaves only the x and y streams.",
             "A few percent less traffic and fewer instructions."),
        ],
    },
    "softmax_rows": {
        "features": {"is_matmul": 0, "is_reduction": 1, "is_scan": 0,
                     "is_elementwise": 0, "strided_access": 1,
                     "divergent_branches": 0, "coalescing": 0.1,
                     "data_reuse": 0.2, "memory_bound": 0.9,
                     "arithmetic_intensity": 0.6, "warp_divergence": 0.1,
                     "bank_conflicts": 0, "parallelism": 0.6,
                     "fusion_opportunity": 0.3},
        "seeds": [("reference", "The reference kernel as it is: a correct "
                   "starting point."),
                  ("typo:2", "One block per row, the row in registers."),
                  ("typo:3", "One block per row with an online max and "
                   "sum.")],
        "rounds": [
            ("broken", "warp_shuffle_reduction",
             ["1. Give each row to one warp instead of one thread, so the "
              "32 lanes read consecutive columns (coalesced).",
              "2. Reduce the row maximum and the sum of exponentials with "
              "warp shuffles, no shared memory.",
              "3. Eight rows per 256-thread block: grid 512."],
             "One thread per row makes every load of a warp touch 32 rows; "
             "a warp per row coalesces and shuffles reduce in registers.",
             "An order of magnitude faster."),
            ("candidates/2", "reduce_memory_passes",
             ["1. One block of 256 threads per row (grid 4096).",
              "2. Read the row once into registers: four float4 per "
              "thread for 4096 columns.",
              "3. Block-reduce max and sum with warp shuffles and a "
              "32-float shared array, then write the row once."],
             "The warp version reads each row three times; holding it in "
             "registers reads it once.",
             "About 2x, from one read instead of three."),
            ("candidates/3", "tune_block_size",
             ["1. Use 128 threads per row, 32 values (eight float4) per "
              "thread.",
              "2. Compute max and sum in one online pass (rescale the "
              "running sum when the max grows), so the block reduces "
              "once.",
              "3. Grid 4096 blocks of 128 threads."],
             "Fewer, fuller threads halve the barriers and the block "
             "reductions.",
             "A few percent."),
        ],
    },
    "layernorm": {
        "features": {"is_matmul": 0, "is_reduction": 1, "is_scan": 0,
                     "is_elementwise": 0, "strided_access": 1,
                     "divergent_branches": 0, "coalescing": 0.1,
                     "data_reuse": 0.2, "memory_bound": 0.9,
                     "arithmetic_intensity": 0.8, "warp_divergence": 0.1,
                     "bank_conflicts": 0, "parallelism": 0.6,
                     "fusion_opportunity": 0.3},
        "seeds": [("reference", "The reference kernel as it is: a correct "
                   "starting point."),
                  ("typo:2", "One block per row, the row in registers."),
                  ("typo:3", "One warp per row, the row in registers.")],
        "rounds": [
            ("broken", "warp_shuffle_reduction",
             ["1. One warp per row: lanes read consecutive columns.",
              "2. Mean and variance through __shfl_xor_sync sums.",
              "3. Eight rows per 256-thread block: grid 1024."],
             "Loads of a warp hit 32 rows in the reference; a warp per row "
             "coalesces them.",
             "About 10x."),
            ("candidates/2", "reduce_memory_passes",
             ["1. One block of 256 threads per row (grid 8192).",
              "2. Keep the row in registers (two float4 per thread).",
              "3. Two block reductions (mean, then the centred sum of "
              "squares), then one write."],
             "Three passes over each row become one read and one write.",
             "Close to 2x."),
            ("candidates/3", "warp_shuffle_reduction",
             ["1. Back to one warp per row, but with the whole row in "
              "registers (sixteen float4 per lane).",
              "2. Only warp shuffles: no shared memory, no block "
              "barriers.",
              "3. Eight rows per 256-thread block: grid 1024."],
             "The block version pays two barriers per reduction; a warp "
             "needs none.",
             "A few percent, fewer barriers."),
        ],
    },
    "sum_reduce": {
        "features": {"is_matmul": 0, "is_reduction": 1, "is_scan": 0,
                     "is_elementwise": 0, "strided_access": 0,
                     "divergent_branches": 1, "coalescing": 0.9,
                     "data_reuse": 0.1, "memory_bound": 0.8,
                     "arithmetic_intensity": 0.25, "warp_divergence": 0.6,
                     "bank_conflicts": 0.7, "parallelism": 1,
                     "fusion_opportunity": 0.2},
        "seeds": [("reference", "The reference kernels as they are: a "
                   "correct starting point."),
                  ("typo:2", "Two passes through scratch, no atomics."),
                  ("typo:3", "Two passes with four loads in flight per "
                   "thread.")],
        "rounds": [
            ("broken", "warp_shuffle_reduction",
             ["1. Grid-stride loop with float4 loads: 1056 blocks of 256 "
              "threads.",
              "2. Reduce each warp with shuffles, then the block's warps "
              "through a 32-float shared array.",
              "3. One float atomicAdd per block into y."],
             "The reference reduces one element per thread through a "
             "divergent shared-memory tree and 65536 double atomics.",
             "About 5x."),
            ("candidates/2", "hierarchical_reduction",
             ["1. Two passes: each block writes its partial sum to a "
              "scratch array part, then one block of 1024 threads adds "
              "the partials.",
              "2. No atomics: the result no longer depends on the order "
              "in which blocks finish.",
              "3. 1024 blocks of 256 threads, then 1 block of 1024."],
             "The float atomics serialise on one address and make the sum "
             "depend on block order; a second pass over 1024 partials "
             "costs almost nothing.",
             "About the same speed, deterministic."),
            ("candidates/3", "loop_unrolling",
             ["1. Unroll the grid-stride loop by four: four independent "
              "float4 loads into four accumulators per iteration.",
              "2. 528 blocks of 512 threads for the first pass (part of "
              "528 floats), then 1 block of 1024.",
              "3. Add the four accumulators before the block reduction."],
             "One load in flight per thread leaves DRAM latency exposed; "
             "four independent loads keep more bytes in flight.",
             "10% or so."),
        ],
    },
    "matmul_bias_relu": {
        "features": {"is_matmul": 1, "is_reduction": 0, "is_scan": 0,
                     "is_elementwise": 0, "strided_access": 1,
                     "divergent_branches": 0, "coalescing": 0.5,
                     "data_reuse": 0, "memory_bound": 0.7,
                     "arithmetic_intensity": 0.25, "warp_divergence": 0,
                     "bank_conflicts": 0, "parallelism": 1,
                     "fusion_opportunity": 0.8},
        "seeds": [("reference", "The reference kernels as they are: a "
                   "correct starting point."),
                  ("typo:2", "Register blocking, 4 x 4 outputs per "
                   "thread."),
                  ("typo:3", "Register blocking, 8 x 8 outputs per "
                   "thread.")],
        "rounds": [
            ("broken", "shared_memory_tiling",
             ["1. Stage 32 x 32 tiles of a and b in shared memory; each "
              "thread computes one output.",
              "2. Fuse the bias and the ReLU into the store.",
              "3. Grid 64 x 64 blocks of 32 x 32 threads."],
             "Every output re-reads a row and a column from DRAM; tiles "
             "reuse each element 32 times.",
             "Several times faster."),
            ("candidates/2", "register_blocking",
             ["1. A 64 x 64 tile of y per 256-thread block, 4 x 4 outputs "
              "per thread.",
              "2. 16-deep k slices of a (stored k-major) and b in shared "
              "memory.",
              "3. Grid 32 x 32 blocks of 256 threads."],
             "One output per thread is bound by shared-memory loads; 4 x 4 "
             "per thread reuses each load four times.",
             "About 2x."),
            ("candidates/3", "register_blocking",
             ["1. A 128 x 128 tile per block, 8 x 8 outputs per thread.",
              "2. 8-deep k slices loaded with float4; a transposed into "
              "shared memory so both operands are read as float4.",
              "3. Grid 16 x 16 blocks of 256 threads."],
             "Larger register tiles raise the FLOPs per shared load "
             "again.",
             "About 2x."),
        ],
    },
    "conv2d_5x5": {
        "features": {"is_matmul": 1, "is_reduction": 0, "is_scan": 0,
                     "is_elementwise": 0, "strided_access": 0,
                     "divergent_branches": 1, "coalescing": 0.8,
                     "data_reuse": 0.1, "memory_bound": 0.6,
                     "arithmetic_intensity": 1.0, "warp_divergence": 0.2,
                     "bank_conflicts": 0, "parallelism": 1,
                     "fusion_opportunity": 0},
        "seeds": [("reference", "The reference kernel as it is: a correct "
                   "starting point."),
                  ("candidates/1", "The filter in registers, warp-wide "
                   "rows."),
                  ("typo:3", "Row streaming through a shared halo.")],
        "rounds": [
            ("broken", "shared_memory_tiling",
             ["1. A 32 x 32 output tile per 32 x 8 block; stage its "
              "36 x 36 input halo in shared memory once (zero outside "
              "the image).",
              "2. Four output rows per thread, the filter in registers.",
              "3. Grid 64 x 64 x 4."],
             "Each output issues 50 global loads; a staged halo serves "
             "the 25 taps from shared memory.",
             "1.5x or more."),
            ("candidates/3", "register_blocking",
             ["1. A 128-wide, 16-tall output tile per 128-thread block; "
              "stage the 20 x 132 halo in shared memory.",
              "2. Each thread walks the input rows once and adds its five "
              "horizontal taps into the five output rows they feed, held "
              "in registers.",
              "3. Grid 16 x 128 x 4."],
             "Every staged value is read five times, not twenty-five.",
             "About 2x over the reference."),
        ],
    },
}

DIAGNOSES = {
    "bias_gelu": "Uses the tanh approximation of GELU where the task needs "
                 "the exact erf form; the approximation is off by up to "
                 "1e-3, over atol/rtol 1e-5.",
    "softmax_rows": "warp_max and warp_sum reduce with __shfl_down_sync, "
                    "which leaves the full max and sum in lane 0 only; the "
                    "other lanes normalise with partial values.",
    "layernorm": "The variance divides the sum of squares by cols - 1 "
                 "(unbiased); layer norm uses the biased variance, so "
                 "every output is off by a relative 2.4e-4.",
    "sum_reduce": "The block sums are added atomically into y, which is "
                  "never cleared; y holds NaN (the sandbox's poison) when "
                  "a run starts.",
    "matmul_bias_relu": "The epilogue adds bias[row] where the bias is per "
                        "output column; every element off the diagonal "
                        "gets the wrong shift.",
    "conv2d_5x5": "Only the first TH rows of the TH + 4 halo rows are "
                  "staged in shared memory; the bottom outputs of every "
                  "tile read uninitialised shared memory.",
}

FIXES = {
    "bias_gelu": "gelu: 0.5f * v * (1.0f + erff(v * 0.70710678f))",
    "softmax_rows": "reduce with __shfl_xor_sync so every lane gets the "
                    "result",
    "layernorm": "var = warp_sum(q) / cols",
    "sum_reduce": "a first plan step clear_out that sets y to 0",
    "matmul_bias_relu": "add bias[col]",
    "conv2d_5x5": "stage r < TH + 2 * R rows of the halo",
}


def read(path):
    with open(path) as f:
        return f.read()


def repaired(task):
    """The candidate bug.txt names as the repair."""
    bug = read(os.path.join(EXAMPLES, task, "broken/1/bug.txt"))
    mark = "Repaired version: "
    i = bug.index(mark) + len(mark)
    return bug[i:].strip().rstrip(".")


def material(task, what):
    """(source, plan) of 'reference', 'broken', 'candidates/N', 'typo:N'."""
    d = os.path.join(EXAMPLES, task)
    if what == "reference":
        return read(d + "/reference.cu"), read(d + "/reference.plan.json")
    if what == "broken":
        what = "broken/1"
    if what.startswith("typo:"):
        src, plan = material(task, "candidates/" + what[5:])
        assert TYPO_FROM in src, (task, what)
        return src.replace(TYPO_FROM, TYPO_TO, 1), plan
    return read(d + "/" + what + "/kernel.cu"), read(d + "/" + what +
                                                     "/plan.json")


def block(src, plan):
    if not src.endswith("\n"):
        src += "\n"
    return "```cuda\n" + src + "```\n```json\n" + plan.strip() + "\n```\n"


def expected_status(what):
    if what.startswith("typo:"):
        return "COMPILE_ERROR"
    return "WRONG_RESULT" if what == "broken" else "OK"


def replies(task):
    """{relative path: text} of every scripted reply of task."""
    t = TASKS[task]
    out = {}
    # k independent Generator jobs, one seed each: job i answers seed i.
    for i, (what, why) in enumerate(t["seeds"]):
        src, plan = material(task, what)
        out["generator/%d.txt" % i] = "One seed.\n\n### Candidate 1: %s\n" \
            % why + block(src, plan)
    feats = [{"name": k, "value": v, "note": FEATURE_NOTES[k]}
             for k, v in t["features"].items()]
    feature = "```json\n" + json.dumps({"features": feats}, indent=1) + \
        "\n```\n"
    for n in range(len(t["rounds"])):
        out["feature/%d.txt" % n] = feature
    for n, (what, method, steps, why, effect) in enumerate(t["rounds"]):
        plan = {"method": method, "steps": steps, "rationale": why,
                "expected_effect": effect}
        out["planner/%d.txt" % n] = "```json\n" + json.dumps(
            plan, indent=1) + "\n```\n"
        src, lplan = material(task, what)
        out["optimizer/%d.txt" % n] = \
            "The plan applied to the base kernel.\n\n" + block(src, lplan)
    diag = {"category": "wrong_result", "root_cause": DIAGNOSES[task],
            "fix": FIXES[task]}
    out["diagnoser/0.txt"] = "```json\n" + json.dumps(diag, indent=1) + \
        "\n```\n"
    src, plan = material(task, repaired(task))
    out["repairer/0.txt"] = "The fix applied, nothing else changed.\n\n" + \
        block(src, plan)
    return out


def rounds(task):
    """The reviewed kernels of the task in order: optimisation attempts,
    the repair right after the broken one."""
    seq = []
    for what, method, _, _, _ in TASKS[task]["rounds"]:
        seq.append({"origin": "optimizer", "kernel": what, "method": method,
                    "status": expected_status(what)})
        if what == "broken":
            seq.append({"origin": "repairer", "kernel": repaired(task),
                        "status": "OK"})
    return seq


def check_distinct(task):
    """Every kernel the script reviews differs (source or plan) from every
    candidate before it: an identical answer would reuse that evaluation
    (orchestrator: duplicates) and the rounds would no longer fit the
    script."""
    seen = {}
    for what in ([w for w, _ in TASKS[task]["seeds"]] +
                 [r["kernel"] for r in rounds(task)]):
        key = material(task, what)
        assert key not in seen, "%s: %s repeats %s" % (task, what,
                                                       seen[key])
        seen[key] = what


def sources():
    """Every kernel a task's evaluations see: (task, what, source,
    expected status), for tests that script the sandbox."""
    for task, t in TASKS.items():
        seen = set()
        for what in ([w for w, _ in t["seeds"]] +
                     [r["kernel"] for r in rounds(task)] + ["reference"]):
            if what in seen:
                continue
            seen.add(what)
            yield task, what, material(task, what)[0], expected_status(what)


def source_key(src):
    """What the scripted sandbox keys kernels by: SHA-256 of the source
    without surrounding white space."""
    return hashlib.sha256(src.strip().encode()).hexdigest()


def manifest():
    # The Planner replies were written by hand, not chosen from what a
    # GPU's retrieval offers: every round of a replay explores, so each
    # recorded choice stands (docs/orchestrator.md "Screening").
    return {"format": "kclaw-main/1",
            "doc": "The tasks of `kclaw main` in order, with the round "
                   "budget their recordings cover. Generated by "
                   "generate.py.",
            "explore_share": 1,
            "tasks": [{"bundle": task, "rounds": len(rounds(task)),
                       "script": rounds(task)} for task in TASKS]}


def files():
    out = {}
    for task in TASKS:
        check_distinct(task)
        for rel, text in replies(task).items():
            out[task + "/" + rel] = text
    out["main.json"] = json.dumps(manifest(), indent=1) + "\n"
    return out


def main():
    check = "--check" in sys.argv[1:]
    bad = 0
    for rel, text in sorted(files().items()):
        path = os.path.join(HERE, rel)
        if check:
            if not os.path.exists(path) or read(path) != text:
                print("out of date: examples/recordings/" + rel)
                bad += 1
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    if check and bad:
        print("run python3 examples/recordings/generate.py and commit")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
