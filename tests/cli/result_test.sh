#!/bin/sh
# `kclaw result ID --out DIR` (docs/cli.md): the kernel, the plan, the
# measurements (result.json: timing, baseline, errors, warnings, the
# tensors it was verified for, the device), the history (history.json),
# a C launcher that compiles against the CUDA headers, and model_new.py
# that Python compiles. First on a task finished with the test doubles,
# then (kc-export-test) on real kernels and plans: scratch, a matmul step,
# a torch task's scalar. No GPU and no PyTorch needed.
set -u
K="$KCLAW_BIN/kclaw"
X="$KCLAW_BIN/kc-export-test"
H=$(mktemp -d /tmp/kc-result-XXXXXX)
export KCLAW_AGENT_BIN="$KCLAW_BIN/kc-double"
export KCLAW_SANDBOX_BIN="$KCLAW_BIN/kc-double"
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
CC=${CC:-cc}
fail() {
	echo "FAIL: $*" >&2
	tail -n 20 "$H"/run/*.log >&2 2>/dev/null
	"$K" --home "$H" up --stop >/dev/null 2>&1
	rm -rf "$H"
	exit 1
}

# The launcher compiles (to objects, no link, no run) with warnings as
# errors; model_new.py compiles.
check_compiles() {
	d=$1
	if [ -f "$CUDA_INC/cuda.h" ] && [ -f "$CUDA_INC/nvrtc.h" ]; then
		for f in launcher.c main.c; do
			"$CC" -std=c11 -Wall -Wextra -Werror -I"$CUDA_INC" \
				-c "$d/$f" -o "$d/$f.o" 2>"$H/cc.log" ||
				fail "$d/$f does not compile: $(cat "$H/cc.log")"
		done
	else
		echo "no CUDA headers in $CUDA_INC: the launcher is not compiled"
	fi
	python3 -m py_compile "$d/model_new.py" 2>"$H/py.log" ||
		fail "$d/model_new.py: $(cat "$H/py.log")"
	python3 "$KCLAW_SRC/tests/cli/model_new_check.py" "$d/model_new.py" >"$H/py.log" 2>&1 ||
		fail "$d/model_new.py is not the operator it should be: $(cat "$H/py.log")"
	for f in kernel.cu plan.json result.json history.json launcher.h \
		launcher.c main.c model_new.py README.md; do
		[ -s "$d/$f" ] || fail "$d/$f is missing or empty"
	done
}

# ---- a task finished with the test doubles
"$K" --home "$H" up --detach >/dev/null || fail "up --detach"
B="$H/bundle"
mkdir -p "$B"
cat >"$B/task.json" <<'JSON'
{"name": "result_copy", "tensors": [
  {"name": "x", "kind": "input", "dtype": "f32", "shape": [256],
   "init": {"dist": "normal", "mean": 0, "scale": 1}},
  {"name": "w", "kind": "parameter", "dtype": "f16", "shape": [16, 16],
   "init": {"dist": "uniform", "low": -1, "high": 1}},
  {"name": "y", "kind": "output", "dtype": "f32", "shape": [256]}],
 "tolerance": {"atol": 1e-5, "rtol": 1e-5, "max_rel_norm": 1e-5},
 "budget": {"rounds": 2},
 "reference": {"kind": "cuda", "source": "ref.cu", "plan": "ref.plan.json"},
 "context": "script.txt"}
JSON
echo 'extern "C" __global__ void copy(const float *x, float *y) { y[threadIdx.x] = x[threadIdx.x]; }' >"$B/ref.cu"
echo '{"steps": [{"kernel": "copy", "grid": [1,1,1], "block": [256,1,1], "args": ["x", "y"]}]}' >"$B/ref.plan.json"
printf 'seeds=wrong,ok:2.0,ok:3.0;opt=1.0,0.5;ref=4.0' >"$B/script.txt"
id=$("$K" --home "$H" submit "$B") || fail "submit"
i=0
until "$K" --home "$H" status "$id" 2>/dev/null | grep -q "state *DONE"; do
	i=$((i + 1)); [ $i -gt 600 ] && fail "the task never finished DONE"; sleep 0.1
done
O="$H/out"
"$K" --home "$H" result "$id" --out "$O" >/dev/null 2>"$H/err" ||
	fail "result --out: $(cat "$H/err")"
grep -q "wrote $O/" "$H/err" || fail "result --out does not say what it wrote"
grep -q "KC:ok:0.5" "$O/kernel.cu" || fail "kernel.cu is not the best kernel"
check_compiles "$O"
python3 - "$O" "$id" <<'PY' || fail "result.json / history.json"
import json, sys, os
d, tid = sys.argv[1], sys.argv[2]
r = json.load(open(os.path.join(d, "result.json")))
h = json.load(open(os.path.join(d, "history.json")))
assert r["task"]["id"] == tid and r["task"]["state"] == "done", r["task"]
assert r["task"]["name"] == "result_copy"
assert r["status"] == "ok", r["status"]
assert r["timing"]["median_ms"] == 0.5, r["timing"]
assert r["reference_ms"] == 4.0 and abs(r["speedup"] - 8.0) < 1e-9, (r["reference_ms"], r["speedup"])
assert r["torch_compile_ms"] is None and r["compile_speedup"] is None
for k in ("max_abs_err", "max_rel_err", "rel_norm"):
    assert k in r["errors"], r["errors"]
assert isinstance(r["warnings"], list)
# Every output's variation, as the (double) sandbox measured it.
assert r["outputs"] == [{"name": "y", "variation": 0.5, "admits": 1e-5, "degenerate": False}], r["outputs"]
assert r["tolerance"] == {"atol": 1e-5, "rtol": 1e-5, "max_rel_norm": 1e-5}
v = r["verified"]["tensors"]
assert [(t["name"], t["kind"], t["dtype"], t["shape"]) for t in v] == [
    ("x", "input", "f32", [256]), ("w", "parameter", "f16", [16, 16]),
    ("y", "output", "f32", [256])], v
assert v[1]["bytes"] == 512 and v[1]["init"]["dist"] == "uniform"
assert "shapes" in r["verified"]["note"]
assert "name" in r["device"] and "arch" in r["device"]
assert r["candidate"]["id"] == h["best_id"]
c = h["candidates"]
assert len(c) == 5, len(c)
assert sum(1 for x in c if x["best"]) == 1
assert [x["status"] for x in c].count("wrong_result") == 1, [x["status"] for x in c]
for x in c:
    for k in ("id", "status", "median_ms", "speedup", "round", "origin", "method", "parent_id"):
        assert k in x, (k, x)
    if x["status"] == "ok":
        assert x["median_ms"] > 0 and abs(x["speedup"] - 4.0 / x["median_ms"]) < 1e-9, x
    else:
        assert x["speedup"] is None, x
assert {x["origin"] for x in c} >= {"generator", "optimizer"}, c
PY
grep -q "KCLAW_T_x = 0" "$O/launcher.h" && grep -q "KCLAW_T_w = 1" "$O/launcher.h" &&
	grep -q "KCLAW_T_y = 2" "$O/launcher.h" && grep -q "KCLAW_NTENSORS = 3" "$O/launcher.h" ||
	fail "launcher.h: the tensor order"
grep -q "int kclaw_kernel_run(" "$O/launcher.h" || fail "launcher.h: no kclaw_kernel_run"
grep -q "class ModelNew(torch.nn.Module)" "$O/model_new.py" || fail "model_new.py: no ModelNew"
grep -q '^- `w`: parameter f16 \[16, 16\]' "$O/README.md" || fail "README.md: verified tensors"
"$K" --home "$H" up --stop >/dev/null 2>&1

# ---- real kernels and plans
# vec-add-like with scratch, a matmul step, a scalar of a torch task, and
# a kernel source with every character C and Python must escape.
T="$H/torch"
mkdir -p "$T/cand"
cat >"$T/model.py" <<'PY'
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x, scale):
        return torch.relu(self.linear(x)) * scale


def get_inputs():
    return [torch.randn(64, 32), 0.5]


def get_init_inputs():
    return [32]
PY
cat >"$T/task.json" <<'JSON'
{"name": "linear_relu_scale", "tensors": [
  {"name": "x", "kind": "input", "dtype": "f32", "shape": [64, 32]},
  {"name": "scale", "kind": "scalar", "dtype": "f32", "shape": [1], "value": 0.5},
  {"name": "linear_weight", "kind": "parameter", "dtype": "f32", "shape": [32, 32],
   "source_name": "linear.weight"},
  {"name": "linear_bias", "kind": "parameter", "dtype": "f32", "shape": [32],
   "source_name": "linear.bias"},
  {"name": "out", "kind": "output", "dtype": "f32", "shape": [64, 32]}],
 "tolerance": {"atol": 1e-2, "rtol": 1e-2, "max_rel_norm": 1e-2},
 "reference": {"kind": "torch", "source": "model.py", "init_seed": 1}}
JSON
cat >"$T/cand/kernel.cu" <<'CU'
// "scale" ?? a trigraph-like ??= and a backslash \ and a tab	here; é
#include <cuda_fp16.h>
extern "C" __global__ void scale_relu(const float *t, float *y, float s, long long n)
{
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = fmaxf(t[i], 0.0f) * s;
}
CU
cat >"$T/cand/plan.json" <<'JSON'
{"scratch": [{"name": "tmp", "bytes": 8192}],
 "steps": [
  {"matmul": {"a": "x", "b": "linear_weight", "d": "tmp", "bias": "linear_bias",
              "m": 64, "n": 32, "k": 32, "trans_b": true, "epilogue": "bias"}},
  {"kernel": "scale_relu", "grid": 8, "block": [256], "shared_bytes": 65536,
   "args": ["tmp", "out", "scale", {"i64": 2048}]}]}
JSON
E="$H/export"
"$X" "$T" "$T/cand" "$E" || fail "kc-export-test on the torch task"
check_compiles "$E"
cmp -s "$T/cand/kernel.cu" "$E/kernel.cu" || fail "kernel.cu differs from the candidate's"
cmp -s "$T/cand/plan.json" "$E/plan.json" || fail "plan.json differs from the candidate's"
grep -q "#include <cublasLt.h>" "$E/launcher.c" || fail "launcher.c: no cuBLASLt for a matmul step"
grep -q "KCLAW_NSCRATCH 1" "$E/launcher.c" || fail "launcher.c: the scratch buffer"
grep -q "kclaw_matmul(k, &mm, a, b, c, d, bias, s" "$E/launcher.c" || fail "launcher.c: the matmul step"
grep -q "CUBLASLT_EPILOGUE_BIAS}" "$E/launcher.c" || fail "launcher.c: the epilogue"
grep -q "float a2 = 0.5f;" "$E/launcher.c" || fail "launcher.c: the scalar argument"
grep -q "long long a3 = 2048ll;" "$E/launcher.c" || fail "launcher.c: the i64 argument"
grep -q "cuLaunchKernel(k->fn\[0\], 8u, 1u, 1u, 256u, 1u, 1u" "$E/launcher.c" ||
	fail "launcher.c: the launch configuration"
grep -q "65536u, s, p, NULL" "$E/launcher.c" || fail "launcher.c: the dynamic shared memory"
grep -q "scalar f32 = 0.5 (fixed in the plan)" "$E/launcher.h" || fail "launcher.h: the scalar"
grep -q "KCLAW_T_linear_bias = 2" "$E/launcher.h" || fail "launcher.h: the tensor order"
grep -q -- "-lcublasLt" "$E/README.md" || fail "README.md: the link line"
# The embedded sources read back byte for byte, and ModelNew's structure.
python3 - "$E" "$T" <<'PY' || fail "model_new.py's data"
import ast, sys, os
d, t = sys.argv[1], sys.argv[2]
tree = ast.parse(open(os.path.join(d, "model_new.py")).read())
vals = {}
for node in tree.body:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        try:
            vals[node.targets[0].id] = ast.literal_eval(node.value)
        except ValueError:
            pass
assert vals["_KERNEL_CU_BYTES"] == open(os.path.join(t, "cand", "kernel.cu"), "rb").read()
assert vals["_PLAN_JSON"] == open(os.path.join(t, "cand", "plan.json"), "rb").read()
assert vals["_REFERENCE_PY"] == open(os.path.join(t, "model.py"), "rb").read()
import json
task = json.loads(vals["_TASK_JSON"])
assert [x["name"] for x in task["tensors"]] == ["x", "scale", "linear_weight", "linear_bias", "out"]
assert task["tensors"][1]["value"] == 0.5 and task["init_seed"] == 1
assert task["tensors"][2]["source_name"] == "linear.weight"
cls = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"]
assert cls and any(isinstance(f, ast.FunctionDef) and f.name == "forward" for f in cls[0].body)
PY
# The C string literal of kernel.cu reads back byte for byte too.
if [ -f "$CUDA_INC/cuda.h" ]; then
	cat >"$H/src.c" <<'C'
#include <stdio.h>
#include "launcher.c"
int main(void) { fwrite(kclaw_source, 1, sizeof(kclaw_source) - 1, stdout); return 0; }
C
	"$CC" -std=c11 -I"$CUDA_INC" -I"$E" -Wno-unused-function "$H/src.c" -o "$H/src" 2>/dev/null ||
		"$CC" -std=c11 -I"$CUDA_INC" -I"$E" -c "$H/src.c" -o "$H/src.o" ||
		fail "launcher.c with a main does not compile"
	if [ -x "$H/src" ]; then
		"$H/src" | cmp -s - "$T/cand/kernel.cu" || fail "launcher.c's kernel source differs"
	fi
fi

# ---- a cuda example: its own candidate
E2="$H/vec"
"$X" "$KCLAW_SRC/examples/matmul_bias_relu" "$KCLAW_SRC/examples/matmul_bias_relu/candidates/2" "$E2" ||
	fail "kc-export-test on matmul_bias_relu"
check_compiles "$E2"
grep -q '"normal", 0, 0.03125}' "$E2/launcher.c" || fail "launcher.c: the init of b"
rm -rf "$H"
echo "result --out ok"
