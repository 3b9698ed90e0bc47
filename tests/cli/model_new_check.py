"""The structure of an exported model_new.py (PyTorch is not installed in
CI, so the text is what can be checked; the GPU benchmark
tools/bench/torch_ops_bench.py runs it):

    python3 model_new_check.py MODEL_NEW_PY

- it compiles (py_compile);
- the kernel is a torch.library operator: a Library fragment defines the
  schema, a CUDA implementation is registered, and a fake one (
  register_fake, else impl_abstract, else Meta);
- the CUDA implementation launches on torch.cuda.current_stream, with
  outputs and scratch from torch.empty (PyTorch's allocator: a CUDA graph
  capture's pool);
- ModelNew.forward checks its arguments (_mismatch: dtype, shape, device,
  contiguity; scalars) and either calls the operator or falls back to the
  reference with one warning.
"""
import ast
import py_compile
import sys

path = sys.argv[1]
py_compile.compile(path, doraise=True)
src = open(path).read()
tree = ast.parse(src)
funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def calls(fn):
    """The dotted names fn calls."""
    out = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            parts, f = [], n.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                parts.append(f.id)
            out.add(".".join(reversed(parts)))
    return out


def strings(fn):
    return {n.value for n in ast.walk(fn) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


for name in ("_op_register", "_op_cuda", "_op_fake", "_mismatch", "_launch"):
    assert name in funcs, "no %s" % name
reg = calls(funcs["_op_register"])
assert "torch.library.Library" in reg and "lib.define" in reg and "lib.impl" in reg, reg
assert "CUDA" in strings(funcs["_op_register"]) and "FRAGMENT" in strings(funcs["_op_register"])
assert {"torch.library.register_fake", "torch.library.impl_abstract"} <= reg, reg
assert "Meta" in strings(funcs["_op_register"])
cuda = calls(funcs["_op_cuda"])
assert "torch.cuda.current_stream" in cuda and "_launch" in cuda and "torch.empty" in cuda, cuda
assert "torch.empty" in calls(funcs["_empty_outputs"])
launch = calls(funcs["_launch"])
assert "drv.cu.cuLaunchKernel" in launch, launch
mm = calls(funcs["_mismatch"])
assert "x.is_contiguous" in mm, mm
seg = ast.get_source_segment(src, funcs["_mismatch"])
for what in ("x.dtype", "x.shape", "x.is_cuda"):
    assert what in seg, what
assert "ModelNew" in classes
body = {n.name: n for n in classes["ModelNew"].body if isinstance(n, ast.FunctionDef)}
fwd = calls(body["forward"])
assert "KERNEL_OP" in fwd and "self._fallback" in fwd and "self._args" in fwd, fwd
fb = calls(body["_fallback"])
assert "warnings.warn" in fb and "ref" in fb, fb
assert "_mismatch" in calls(body["_args"])
# The operator is looked up once, at import, so torch.compile sees one
# callable (no per-call getattr on torch.ops).
assign = [n for n in tree.body if isinstance(n, ast.Assign) and
          any(isinstance(t, ast.Name) and t.id == "KERNEL_OP" for t in n.targets)]
assert assign, "no module-level KERNEL_OP"
print("model_new.py ok")
