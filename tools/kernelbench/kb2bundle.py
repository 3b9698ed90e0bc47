#!/usr/bin/env python3
"""kb2bundle: turn a KernelBench-style PyTorch problem into a kclaw task bundle.

    kb2bundle.py PROBLEM.py OUT_DIR [--seeds 3] [--seed 1] [--init-seed N]
    kb2bundle.py --tensors PROBLEM.py OUT_DIR [--seeds 3] [--device cuda|cpu]
    kb2bundle.py --batch        (kclaw kernelbench's converter: JSON lines)

A problem file defines `class Model(nn.Module)`, `get_inputs()` and
`get_init_inputs()`.

By default the bundle has a `torch` reference (docs/bundle.md,
docs/torchref.md): the problem's source as model.py and every tensor
declared (the forward's arguments in order, numbers among them as scalars,
the state_dict entries as parameters with their `source_name`, the
forward's results), with shapes and dtypes found without a GPU: the model
and its inputs are built on PyTorch's meta device (no memory, no
arithmetic), on the GPU for a model with a recurrent module where there is
one (the meta device runs a recurrence step by step, seconds a problem),
or on the CPU where the meta device cannot run the problem and it is small
enough. The sandbox runs the problem live at evaluation time.

With --tensors the bundle has a `tensors` reference as before: the tool
builds the model, draws the inputs for each seed with
`torch.manual_seed(seed)`, stores them with the model's outputs as .npy
files and times PyTorch eager and torch.compile on the same device.

Everything that does not need PyTorch (names, declarations, .npy files,
task.json) lives in plain functions below and is tested without it
(tests/tasks/kb2bundle_test.py); PyTorch is imported only by `convert` and
`convert_torch`.
"""
import argparse
import importlib.util
import inspect
import json
import keyword
import numbers
import os
import re
import shutil
import statistics
import struct
import sys
import time

# C and CUDA words a tensor may not be named after: a plan names tensors,
# and agents write them as kernel parameter names.
C_RESERVED = {
    "auto", "bool", "break", "case", "char", "const", "continue", "default",
    "do", "double", "else", "enum", "extern", "float", "for", "goto", "if",
    "inline", "int", "long", "register", "restrict", "return", "short",
    "signed", "sizeof", "static", "struct", "switch", "typedef", "union",
    "unsigned", "void", "volatile", "while", "class", "delete", "new",
    "operator", "private", "protected", "public", "template", "this",
    "throw", "try", "catch", "namespace", "using", "virtual", "friend",
    "half", "dim3", "threadIdx", "blockIdx", "blockDim", "gridDim",
    "warpSize", "true", "false", "nullptr",
}
NAME_MAX = 63

# kclaw dtype -> (.npy descr, bytes per element). bfloat16 has no NumPy type:
# its raw 16-bit patterns travel as a 2-byte void type, as ml_dtypes saves it.
DTYPES = {
    "f32": ("<f4", 4), "f16": ("<f2", 2), "bf16": ("<V2", 2),
    "f64": ("<f8", 8), "i32": ("<i4", 4), "i64": ("<i8", 8),
    "i8": ("|i1", 1), "u8": ("|u1", 1), "bool": ("|b1", 1),
}
TORCH_DTYPES = {
    "torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16",
    "torch.float64": "f64", "torch.int32": "i32", "torch.int64": "i64",
    "torch.int8": "i8", "torch.uint8": "u8", "torch.bool": "bool",
}
# A scalar (a number among get_inputs()' values) is passed to a plan as a
# typed argument: f32 for a float, i64 for an integer or a bool.
SCALAR_DTYPES = ("f32", "i64")
KINDS = ("input", "parameter", "output", "scalar")
DEFAULT_TOLERANCE = {"atol": 1e-2, "rtol": 1e-2, "max_rel_norm": 1e-2}
# Where the meta device cannot run a problem, shapes come from a CPU run if
# its inputs and weights take at most this many bytes.
CPU_MAX_BYTES = 2 << 30


class BridgeError(Exception):
    """A problem the user can fix; the message says what and how."""


# ------------------------------------------------------------------- names

def c_identifier(name, taken):
    """Mangles a state_dict or argument name ("layers.0.weight") into a C
    identifier ("layers_0_weight") not in `taken`, and adds it there."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    s = re.sub(r"_+", "_", s).strip("_") or "t"
    if s[0].isdigit():
        s = "t_" + s
    if s in C_RESERVED or keyword.iskeyword(s) or s.startswith("__"):
        s = "t_" + s
    s = s[:NAME_MAX]
    out, n = s, 2
    while out in taken:
        suffix = "_%d" % n
        out = s[:NAME_MAX - len(suffix)] + suffix
        n += 1
    taken.add(out)
    return out


def task_name(path):
    """A task name (letters, digits, '_', '-', '.') from a problem file,
    prefixed L<n>_ when the file lies in a folder named level<n>, as
    KernelBench's do (level1/19_ReLU.py: L1_19_ReLU), so that `kclaw report
    --by level` can group the tasks by level."""
    stem = os.path.splitext(os.path.basename(path))[0]
    s = re.sub(r"[^A-Za-z0-9_.-]", "_", stem).lstrip(".")
    level = re.fullmatch(r"level(\d+)", os.path.basename(os.path.dirname(os.path.abspath(path))))
    if level:
        s = "L%d_%s" % (int(level.group(1)), s or "problem")
    return s[:128] or "problem"


def forward_arg_names(fn, count):
    """Names of the first `count` positional arguments of a forward method,
    falling back to x0, x1, ... where the signature does not say (*args)."""
    names = []
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    for p in params:
        if p.name == "self":
            continue
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
    if len(names) < count:
        names = names + ["x%d" % i for i in range(len(names), count)]
    return names[:count]


# --------------------------------------------------------------------- npy

def npy_header(descr, shape):
    """A version 1.0 .npy header for C-ordered data, padded so the data
    starts on a 64-byte boundary, as NumPy writes it."""
    if descr not in {d for d, _ in DTYPES.values()}:
        raise BridgeError("dtype descr %r is not one kclaw reads" % descr)
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise BridgeError("negative dimension in shape %r" % (shape,))
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    pad = 64 - (10 + len(text) + 1) % 64
    text = text + " " * (pad % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


def write_npy(path, descr, shape, data):
    """Writes raw C-ordered little-endian bytes as a .npy file."""
    sizes = {d: n for d, n in DTYPES.values()}
    if descr not in sizes:
        raise BridgeError("dtype descr %r is not one kclaw reads" % descr)
    size = sizes[descr]
    count = 1
    for d in shape:
        count *= int(d)
    if len(data) != count * size:
        raise BridgeError("%s: %d bytes of data for shape %r of %s (%d expected)"
                          % (path, len(data), tuple(shape), descr, count * size))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(npy_header(descr, shape))
        f.write(data)
    os.replace(tmp, path)


def read_npy(path):
    """Reads a .npy file written by write_npy or NumPy: (descr, shape, data)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != b"\x93NUMPY":
        raise BridgeError("%s is not a .npy file" % path)
    if raw[6] == 1:
        hlen, off = struct.unpack("<H", raw[8:10])[0], 10
    else:
        hlen, off = struct.unpack("<I", raw[8:12])[0], 12
    hdr = raw[off:off + hlen].decode("latin1")
    m = re.search(r"'descr':\s*'([^']+)'", hdr)
    s = re.search(r"'shape':\s*\(([^)]*)\)", hdr)
    if not m or not s or "'fortran_order': False" not in hdr:
        raise BridgeError("%s has a header kclaw does not read: %s" % (path, hdr))
    shape = tuple(int(d) for d in s.group(1).replace(",", " ").split())
    return m.group(1), shape, raw[off + hlen:]


# --------------------------------------------------------------- the bundle

class Tensor:
    """One named tensor of the task: an input, parameter or output, or a
    scalar (a number get_inputs() returns; `value` is the number)."""

    def __init__(self, name, kind, dtype, shape, source_name=None, value=None):
        if kind not in KINDS:
            raise BridgeError("tensor %s: kind %s is not one of %s" % (name, kind, ", ".join(KINDS)))
        if kind == "scalar":
            if dtype not in SCALAR_DTYPES:
                raise BridgeError("scalar %s: dtype %s is not one of %s"
                                  % (name, dtype, ", ".join(SCALAR_DTYPES)))
            shape = [1]
        elif dtype not in DTYPES:
            raise BridgeError("tensor %s: dtype %s is not one of %s"
                              % (name, dtype, ", ".join(DTYPES)))
        self.name, self.kind, self.dtype = name, kind, dtype
        self.shape = [int(d) for d in shape] or [1]
        self.source_name = source_name or name
        self.value = value

    def nbytes(self):
        n = DTYPES[self.dtype][1] if self.kind != "scalar" else 0
        for d in self.shape:
            n *= d
        return n

    def json(self):
        """The tensor's entry in task.json. A parameter names its
        state_dict entry (`source_name`); a scalar has kind "scalar"."""
        j = {"name": self.name, "kind": self.kind, "dtype": self.dtype, "shape": self.shape}
        if self.kind == "parameter":
            j["source_name"] = self.source_name
        if self.kind == "scalar" and self.value is not None:
            v = self.value
            j["value"] = int(v) if self.dtype == "i64" else float(v)
        return j


def scalar_dtype(value):
    """The kclaw dtype of a number get_inputs() returns: i64 for integers
    and bools, f32 for other reals; anything else is refused."""
    if isinstance(value, (bool, numbers.Integral)):
        return "i64"
    if isinstance(value, numbers.Real):
        return "f32"
    raise BridgeError("get_inputs() returned a %s (%r); kclaw passes tensors and numbers to a "
                      "kernel, so make it a tensor or move it into get_init_inputs()"
                      % (type(value).__name__, value))


def declare_tensors(arg_names, inputs, state, outputs):
    """The task's tensors from what the problem gave, PyTorch-free.

    arg_names: forward's argument names (forward_arg_names);
    inputs: get_inputs()' values in order, each ("tensor", dtype, shape) or
    ("scalar", value); state: the state_dict as (key, dtype, shape);
    outputs: the forward's results as (dtype, shape). Returns the Tensors:
    inputs and scalars in get_inputs() order, parameters, outputs
    ("out", or "out0", "out1", ... for several)."""
    if not outputs:
        raise BridgeError("the model returned no tensor")
    taken, tensors = set(), []
    names = list(arg_names) + ["x%d" % i for i in range(len(arg_names), len(inputs))]
    for n, v in zip(names, inputs):
        if v[0] == "scalar":
            tensors.append(Tensor(c_identifier(n, taken), "scalar", scalar_dtype(v[1]), [1], n,
                                  value=v[1]))
        else:
            tensors.append(Tensor(c_identifier(n, taken), "input", v[1], v[2], n))
    for key, dt, shape in state:
        tensors.append(Tensor(c_identifier(key, taken), "parameter", dt, shape, key))
    onames = ["out"] if len(outputs) == 1 else ["out%d" % i for i in range(len(outputs))]
    for n, (dt, shape) in zip(onames, outputs):
        tensors.append(Tensor(c_identifier(n, taken), "output", dt, shape, n))
    return tensors


def write_torch_bundle(out_dir, name, description, source, tensors, tolerance=None,
                       init_seed=1, trials=3, seed=1, budget=None, provenance=None):
    """Writes a bundle with a `torch` reference: model.py (the problem's
    source, also the agents' context), task.json declaring every tensor,
    and kb2bundle.json (each tensor's origin, how shapes were found).
    Returns the path of task.json."""
    if not any(t.kind == "output" for t in tensors):
        raise BridgeError("the model returned no tensor")
    if not source or not source.strip():
        raise BridgeError("the problem's source is empty")
    if not 1 <= int(trials) <= 64:
        raise BridgeError("trials must be 1 to 64")
    seen = set()
    for t in tensors:
        if t.name in seen:
            raise BridgeError("tensor name %s is used twice" % t.name)
        seen.add(t.name)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.py"), "w") as f:
        f.write(source)
    task = {
        "name": name,
        "description": description,
        "tensors": [t.json() for t in tensors],
        "tolerance": tolerance or dict(DEFAULT_TOLERANCE),
        "budget": budget or {"rounds": 15},
        "trials": int(trials),
        "seed": int(seed),
        "reference": {"kind": "torch", "source": "model.py", "init_seed": int(init_seed)},
        "context": "model.py",
    }
    with open(os.path.join(out_dir, "kb2bundle.json"), "w") as f:
        json.dump({"sources": {t.name: t.source_name for t in tensors},
                   "scalars": {t.name: t.value for t in tensors if t.kind == "scalar"},
                   "provenance": provenance or {}}, f, indent=1)
        f.write("\n")
    path = os.path.join(out_dir, "task.json")
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(task, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return path


def write_bundle(out_dir, name, description, context, tensors, params, sets,
                 tolerance, baseline_ms, torch_compile_ms=None, budget=None,
                 provenance=None):
    """Writes a bundle with a `tensors` reference.

    tensors: list of Tensor (inputs, parameters, outputs, in that order of
    appearance in task.json); params: {name: bytes} for the parameters;
    sets: list of (seed, {input name: bytes}, {output name: bytes}).
    provenance: facts about how the data was made, kept in kb2bundle.json.
    Returns the path of task.json.
    """
    if not sets:
        raise BridgeError("no input sets: ask for at least one seed")
    if not any(t.kind == "output" for t in tensors):
        raise BridgeError("the model returned no tensor")
    if any(t.kind == "scalar" for t in tensors):
        raise BridgeError("a tensors reference has no scalars; write a torch bundle "
                          "(without --tensors)")
    if not baseline_ms or baseline_ms <= 0:
        raise BridgeError("baseline_ms must be a positive time")
    os.makedirs(out_dir, exist_ok=True)
    by_name = {t.name: t for t in tensors}
    for pname, data in params.items():
        t = by_name[pname]
        write_npy(os.path.join(out_dir, "params", pname + ".npy"),
                  DTYPES[t.dtype][0], t.shape, data)
    jsets = []
    for i, (seed, inputs, outputs) in enumerate(sets):
        jin, jout = {}, {}
        for t in tensors:
            if t.kind == "parameter":
                jin[t.name] = "params/%s.npy" % t.name
                continue
            src = inputs if t.kind == "input" else outputs
            if t.name not in src:
                raise BridgeError("set %d has no data for %s %s" % (i, t.kind, t.name))
            rel = "set%d/%s.npy" % (i, t.name)
            write_npy(os.path.join(out_dir, rel), DTYPES[t.dtype][0], t.shape, src[t.name])
            (jin if t.kind == "input" else jout)[t.name] = rel
        jsets.append({"seed": int(seed), "inputs": jin, "expected": jout})
    reference = {"kind": "tensors", "sets": jsets, "baseline_ms": float(baseline_ms)}
    if torch_compile_ms:
        reference["torch_compile_ms"] = float(torch_compile_ms)
    task = {
        "name": name,
        "description": description,
        "tensors": [t.json() for t in tensors],
        "tolerance": tolerance,
        "budget": budget or {"rounds": 15},
        "trials": len(sets),
        "seed": int(sets[0][0]),
        "reference": reference,
    }
    if context is not None:
        with open(os.path.join(out_dir, "context.py"), "w") as f:
            f.write(context)
        task["context"] = "context.py"
    # Provenance beside task.json (the loader reads only what task.json
    # names): which module attribute or argument each tensor came from.
    with open(os.path.join(out_dir, "kb2bundle.json"), "w") as f:
        json.dump({"sources": {t.name: t.source_name for t in tensors},
                   "provenance": provenance or {}}, f, indent=1)
        f.write("\n")
    path = os.path.join(out_dir, "task.json")
    with open(path, "w") as f:
        json.dump(task, f, indent=1)
        f.write("\n")
    return path


def describe(problem, tensors):
    """One paragraph for the agents: where the task came from and which
    module attribute each parameter tensor is."""
    parts = ["KernelBench problem %s, evaluated as Model(*get_init_inputs())"
             ".eval() under torch.no_grad()." % os.path.basename(problem)]
    ins = [t for t in tensors if t.kind in ("input", "scalar")]
    outs = [t for t in tensors if t.kind == "output"]
    ps = [t for t in tensors if t.kind == "parameter"]

    def fmt(t):
        if t.kind == "scalar":
            return "%s %s scalar%s" % (t.name, t.dtype,
                                       "" if t.value is None else " = %r" % (t.value,))
        return "%s %s%s" % (t.name, t.dtype, t.shape)
    parts.append("Inputs (forward's arguments in order): %s." % ", ".join(map(fmt, ins)))
    if ps:
        parts.append("Parameters (tensor <- state_dict entry): %s." % ", ".join(
            "%s <- %s" % (fmt(t), t.source_name) for t in ps))
    parts.append("Outputs (forward's results in order): %s." % ", ".join(map(fmt, outs)))
    return " ".join(parts)


# ------------------------------------------------------------ with PyTorch

def _torch_bytes(t):
    """Raw little-endian C-ordered bytes of a tensor and its kclaw dtype."""
    import torch

    dtype = TORCH_DTYPES.get(str(t.dtype))
    if dtype is None:
        raise BridgeError("dtype %s is not one kclaw handles (%s); convert it in "
                          "the problem" % (t.dtype, ", ".join(TORCH_DTYPES)))
    t = t.detach().to("cpu").contiguous()
    if t.dim() == 0:
        t = t.reshape(1)
    if dtype == "bf16":
        t = t.view(torch.int16)
    return dtype, list(t.shape), t.numpy().tobytes()


def _load_problem(path):
    spec = importlib.util.spec_from_file_location("kb_problem", path)
    if spec is None:
        raise BridgeError("%s is not a Python file" % path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, attr):
            raise BridgeError("%s defines no %s; a KernelBench problem defines "
                              "class Model, get_inputs() and get_init_inputs()"
                              % (path, attr))
    return mod


def _outputs(result):
    import torch

    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and all(isinstance(r, torch.Tensor) for r in result):
        return list(result)
    raise BridgeError("forward returned %s; kclaw compares tensors, so return a "
                      "tensor or a tuple of tensors" % type(result).__name__)


def _kc_dtype(t, what):
    dt = TORCH_DTYPES.get(str(t.dtype))
    if dt is None:
        raise BridgeError("%s has dtype %s, which kclaw does not handle (%s); convert it in the "
                          "problem" % (what, t.dtype, ", ".join(sorted(TORCH_DTYPES))))
    return dt


def _describe_values(vals, what):
    """get_inputs()' values as declare_tensors wants them."""
    import torch

    out = []
    for i, v in enumerate(vals):
        if isinstance(v, torch.Tensor):
            out.append(("tensor", _kc_dtype(v, "%s[%d]" % (what, i)), [int(d) for d in v.shape]))
        else:
            scalar_dtype(v)  # refuses what is not a number
            out.append(("scalar", v.item() if hasattr(v, "item") else v))
    return out


def _probe(mod, device, init_seed, seed):
    """Builds the model and draws the inputs on `device` ("meta", "cpu" or
    "cuda")
    and runs the forward once: (inputs, state, outputs) as declare_tensors
    takes them, and the input and weight bytes. A failure raises with the
    step that failed in `step`."""
    import torch

    step = ["get_init_inputs() and Model()"]
    try:
        torch.manual_seed(init_seed)
        with torch.device(device):
            init = mod.get_init_inputs()
            model = mod.Model(*init)
        model = model.eval()
        state = [(k, _kc_dtype(v, "state_dict entry %s" % k), [int(d) for d in v.shape])
                 for k, v in model.state_dict().items()]
        step[0] = "get_inputs()"
        torch.manual_seed(seed)
        with torch.device(device):
            vals = mod.get_inputs()
        if not isinstance(vals, (list, tuple)):
            raise BridgeError("get_inputs() returned a %s; return a list of the forward's "
                              "arguments" % type(vals).__name__)
        vals = list(vals)
        inputs = _describe_values(vals, "get_inputs()")
        nbytes = sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))
        nbytes += sum(v.numel() * v.element_size() for v in model.state_dict().values())
        step[0] = "forward"
        with torch.no_grad(), torch.device(device):
            outs = _outputs(model(*vals))
        outputs = [(_kc_dtype(o, "output %d" % i), [int(d) for d in o.shape])
                   for i, o in enumerate(outs)]
        names = forward_arg_names(model.forward, len(vals))
        return names, inputs, state, outputs, nbytes
    except BridgeError:
        raise
    except Exception as e:
        e.kb_step = step[0]
        raise


def _recurrent_on_gpu(mod, init_seed, seed, max_bytes):
    """Whether to find the shapes on the GPU rather than the meta device: a
    model with a recurrent module (nn.LSTM, nn.GRU, nn.RNN) where PyTorch
    sees a GPU and the inputs and weights fit in max_bytes. The meta device
    has no kernel for the fused recurrence, so it runs it step by step in
    Python decompositions: 7-20 s for each of KernelBench's LSTM and GRU
    problems on the meta device (93 of the 103 s that converting all 250
    took), a few milliseconds with cuDNN."""
    import torch

    try:
        if not torch.cuda.is_available():
            return False
        torch.manual_seed(init_seed)
        with torch.device("meta"):
            model = mod.Model(*mod.get_init_inputs())
            if not any(isinstance(m, torch.nn.RNNBase) for m in model.modules()):
                return False
            torch.manual_seed(seed)
            vals = mod.get_inputs()
        size = sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))
        size += sum(v.numel() * v.element_size() for v in model.state_dict().values())
        return size <= max_bytes
    except Exception:
        return False  # the meta probe below says what is wrong


def convert_torch(problem, out_dir, base_seed=1, init_seed=None, trials=3, tolerance=None,
                  cpu_max_bytes=CPU_MAX_BYTES, log=print):
    """Converts one problem file into a `torch` bundle in out_dir; returns
    task.json's path. Needs PyTorch, not a GPU: shapes come from the meta
    device, or from the CPU where the meta device fails and the problem's
    inputs and weights fit in cpu_max_bytes."""
    import torch

    init_seed = base_seed if init_seed is None else init_seed
    mod = _load_problem(problem)
    how = "cuda" if _recurrent_on_gpu(mod, init_seed, base_seed, cpu_max_bytes) else "meta"
    if how == "cuda":
        try:
            found = _probe(mod, "cuda", init_seed, base_seed)
        except BridgeError:
            raise
        except Exception as e:
            log("%s: finding shapes on the GPU failed (%s: %s); trying the meta device"
                % (os.path.basename(problem), type(e).__name__,
                   (str(e).strip().splitlines() or [""])[0][:200]))
            found, how = None, "meta"
        torch.cuda.empty_cache()  # the GPU is the sandbox's
    try:
        if how != "cuda":
            found = _probe(mod, "meta", init_seed, base_seed)
        names, inputs, state, outputs, nbytes = found
    except BridgeError:
        raise
    except Exception as e:
        step = getattr(e, "kb_step", "?")
        first = (str(e).strip().splitlines() or [""])[0][:200]
        # How big is it? The meta device may have got as far as the inputs.
        size = None
        try:
            torch.manual_seed(init_seed)
            with torch.device("meta"):
                m = mod.Model(*mod.get_init_inputs())
                vals = mod.get_inputs()
            size = sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))
            size += sum(v.numel() * v.element_size() for v in m.state_dict().values())
        except Exception:
            pass
        if size is not None and size > cpu_max_bytes:
            raise BridgeError("the meta device cannot run %s (%s: %s: %s) and its inputs and weights "
                              "take %.1f GB, more than --cpu-max-bytes %d; raise that to let the CPU "
                              "find the shapes" % (os.path.basename(problem), step, type(e).__name__,
                                                   first, size / 1e9, cpu_max_bytes))
        log("the meta device cannot run %s (%s: %s: %s); finding shapes on the CPU%s"
            % (os.path.basename(problem), step, type(e).__name__, first,
               "" if size is None else " (%.2f GB)" % (size / 1e9)))
        how = "cpu"
        try:
            names, inputs, state, outputs, nbytes = _probe(mod, "cpu", init_seed, base_seed)
        except BridgeError:
            raise
        except Exception as e2:
            raise BridgeError("%s fails on the CPU too (%s: %s: %s); fix the problem"
                              % (os.path.basename(problem), getattr(e2, "kb_step", "?"),
                                 type(e2).__name__, (str(e2).strip().splitlines() or [""])[0][:200]))
    tensors = declare_tensors(names, inputs, state, outputs)
    with open(problem) as f:
        source = f.read()
    prov = {"problem": os.path.abspath(problem), "shapes_from": how, "torch": torch.__version__,
            "input_and_weight_bytes": nbytes}
    return write_torch_bundle(out_dir, task_name(problem), describe(problem, tensors), source,
                              tensors, tolerance or dict(DEFAULT_TOLERANCE), init_seed, trials,
                              base_seed, provenance=prov)


def _time_ms(fn, device, warmup, iters):
    """Median wall time of fn in ms: CUDA events on a GPU, the clock on CPU."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def convert(problem, out_dir, seeds=3, device="cuda", base_seed=1, compile_=True,
            warmup=5, iters=50, tolerance=None, log=print):
    """Converts one problem file into a bundle in out_dir; returns task.json's
    path. Needs PyTorch (and a GPU when device is cuda)."""
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BridgeError("--device cuda but PyTorch sees no GPU; run where one is "
                          "or pass --device cpu")
    mod = _load_problem(problem)
    torch.manual_seed(base_seed)
    model = mod.Model(*mod.get_init_inputs()).to(device).eval()

    taken, tensors, params = set(), [], {}
    first_inputs = None
    sets = []
    for s in range(seeds):
        seed = base_seed + s
        torch.manual_seed(seed)
        inputs = mod.get_inputs()
        bad = [type(x).__name__ for x in inputs if not isinstance(x, torch.Tensor)]
        if bad:
            raise BridgeError("get_inputs() returned non-tensors (%s); a tensors bundle "
                              "has tensor inputs only: write a torch bundle (without "
                              "--tensors), which passes numbers as scalars, or move the "
                              "constants into Model's get_init_inputs()" % ", ".join(bad))
        inputs = [x.to(device) for x in inputs]
        saved = [_torch_bytes(x) for x in inputs]  # before forward may mutate them
        with torch.no_grad():
            outs = _outputs(model(*inputs))
        if first_inputs is None:
            first_inputs = inputs
            names = forward_arg_names(model.forward, len(inputs))
            for n, (dt, shape, _) in zip(names, saved):
                tensors.append(Tensor(c_identifier(n, taken), "input", dt, shape, n))
            for key, p in model.state_dict().items():
                dt, shape, data = _torch_bytes(p)
                t = Tensor(c_identifier(key, taken), "parameter", dt, shape, key)
                tensors.append(t)
                params[t.name] = data
            onames = ["out"] if len(outs) == 1 else ["out%d" % i for i in range(len(outs))]
            for n, o in zip(onames, outs):
                dt, shape, _ = _torch_bytes(o)
                tensors.append(Tensor(c_identifier(n, taken), "output", dt, shape, n))
        ins = [t for t in tensors if t.kind == "input"]
        outt = [t for t in tensors if t.kind == "output"]
        if len(outs) != len(outt):
            raise BridgeError("forward returned %d tensors for seed %d but %d for "
                              "seed %d" % (len(outs), seed, len(outt), base_seed))
        sets.append((seed, {t.name: d for t, (_, _, d) in zip(ins, saved)},
                     {t.name: _torch_bytes(o)[2] for t, o in zip(outt, outs)}))

    with torch.no_grad():
        eager_ms = _time_ms(lambda: model(*first_inputs), device, warmup, iters)
    log("eager: %.4f ms on %s" % (eager_ms, device))
    compile_ms = None
    if compile_:
        try:
            compiled = torch.compile(model)
            with torch.no_grad():
                compile_ms = _time_ms(lambda: compiled(*first_inputs), device,
                                      warmup, iters)
            log("torch.compile: %.4f ms" % compile_ms)
        except Exception as e:  # any backend failure only loses the number
            log("torch.compile unavailable here, skipped: %s" % str(e).splitlines()[0][:200])

    with open(problem) as f:
        context = f.read()
    prov = {"problem": os.path.abspath(problem), "device": device,
            "device_name": (torch.cuda.get_device_name() if device.startswith("cuda")
                            else "cpu"),
            "torch": torch.__version__, "seeds": [st[0] for st in sets],
            "eager_ms": eager_ms, "torch_compile_ms": compile_ms,
            "timing": "median of %d runs after %d warm-up runs" % (iters, warmup)}
    return write_bundle(out_dir, task_name(problem), describe(problem, tensors), context,
                        tensors, params, sets,
                        tolerance or {"atol": 1e-2, "rtol": 1e-2, "max_rel_norm": 1e-2},
                        eager_ms, compile_ms, provenance=prov)


# ------------------------------------------------------------ batch mode

def _emit(out, obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()


def batch(inp=None, out=None, err=None):
    """The converter of `kclaw kernelbench` (docs/kernelbench.md "The
    converter"): one process converts every problem, so PyTorch is imported
    once. The first line on stdout says whether it can work:
    {"ready": true, "torch": VERSION, "import_s": S} or {"ready": false,
    "error": WHY} (then it exits 3). Each line on stdin then asks for one
    bundle, {"problem": PY_FILE, "out": DIR, "seeds": N, "seed": N}, and
    gets one line back: {"problem", "ok": true, "task_json", "ms"} or
    {"problem", "ok": false, "error"}. DIR is written whole or not at all
    (a folder beside it, renamed). End of input ends the process (exit 0).
    Logs go to stderr."""
    inp = inp or sys.stdin
    out = out or sys.stdout
    err = err or sys.stderr
    t0 = time.monotonic()
    try:
        import torch
    except ImportError as e:
        _emit(out, {"ready": False,
                    "error": "PyTorch is not installed for %s (%s); install it there "
                             "(pip install torch) or set KCLAW_PYTHON to a Python that "
                             "has it" % (sys.executable, e)})
        return 3
    _emit(out, {"ready": True, "torch": torch.__version__, "python": sys.executable,
                "import_s": round(time.monotonic() - t0, 3)})
    for line in inp:
        line = line.strip()
        if not line:
            continue
        t1 = time.monotonic()
        try:
            req = json.loads(line)
            problem, dest = req["problem"], req["out"]
        except (ValueError, KeyError, TypeError) as e:
            _emit(out, {"ok": False, "error": "bad request %r: %s" % (line[:200], e)})
            continue
        ans = {"problem": problem}
        tmp = "%s.tmp.%d" % (dest.rstrip("/"), os.getpid())
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            convert_torch(problem, tmp, int(req.get("seed", 1)), None, int(req.get("seeds", 3)),
                          None, int(req.get("cpu_max_bytes", CPU_MAX_BYTES)),
                          log=lambda m: print("kb2bundle: %s" % m, file=err, flush=True))
            if os.path.exists(dest):
                shutil.rmtree(dest)
            os.rename(tmp, dest)
            ans.update(ok=True, task_json=os.path.join(dest, "task.json"))
        except BridgeError as e:
            ans.update(ok=False, error=str(e))
        except Exception as e:  # the problem's own code failed
            first = (str(e).strip().splitlines() or [""])[0][:300]
            ans.update(ok=False, error="%s: %s" % (type(e).__name__, first))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        ans["ms"] = round((time.monotonic() - t1) * 1000, 3)
        _emit(out, ans)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--batch"]:
        sys.exit(batch())
    ap = argparse.ArgumentParser(
        description="Turn a KernelBench-style problem (class Model, get_inputs, "
                    "get_init_inputs) into a kclaw task bundle: a torch reference (the "
                    "problem run live by the sandbox; no GPU needed here) or, with "
                    "--tensors, stored inputs and expected outputs.")
    ap.add_argument("problem", help="the problem's .py file")
    ap.add_argument("out_dir", help="the bundle folder to write (created)")
    ap.add_argument("--tensors", action="store_true",
                    help="write a tensors reference (.npy inputs and outputs, timed here) "
                         "instead of a torch one, for evaluation without PyTorch")
    ap.add_argument("--seeds", type=int, default=3,
                    help="verification trials (torch) or input sets (--tensors); default 3")
    ap.add_argument("--seed", type=int, default=1, help="first seed (default 1)")
    ap.add_argument("--init-seed", type=int, default=None,
                    help="torch: the seed the weights are made under (default --seed)")
    ap.add_argument("--cpu-max-bytes", type=int, default=CPU_MAX_BYTES,
                    help="torch: where the meta device fails, find shapes on the CPU only if "
                         "the inputs and weights take at most this (default 2 GiB)")
    ap.add_argument("--device", default="cuda", help="--tensors: cuda or cpu (default cuda)")
    ap.add_argument("--no-compile", action="store_true",
                    help="--tensors: skip torch.compile timing")
    ap.add_argument("--iters", type=int, default=50, help="--tensors: timed iterations")
    ap.add_argument("--atol", type=float, default=1e-2)
    ap.add_argument("--rtol", type=float, default=1e-2)
    ap.add_argument("--max-rel-norm", type=float, default=1e-2)
    ap.add_argument("--force", action="store_true", help="replace OUT_DIR if it exists")
    a = ap.parse_args(argv)
    if a.seeds < 1 or a.seeds > 64:
        ap.error("--seeds must be 1 to 64")
    if os.path.exists(a.out_dir) and os.listdir(a.out_dir):
        if not a.force:
            ap.error("%s exists and is not empty; pass --force to replace it" % a.out_dir)
        shutil.rmtree(a.out_dir)
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("kb2bundle: PyTorch is not installed here; run it where PyTorch is "
                 "(pip install torch), then copy the bundle")
    tol = {"atol": a.atol, "rtol": a.rtol, "max_rel_norm": a.max_rel_norm}
    try:
        if a.tensors:
            path = convert(a.problem, a.out_dir, a.seeds, a.device, a.seed, not a.no_compile,
                           iters=a.iters, tolerance=tol)
        else:
            path = convert_torch(a.problem, a.out_dir, a.seed, a.init_seed, a.seeds, tol,
                                 a.cpu_max_bytes, log=lambda m: print("kb2bundle: %s" % m,
                                                                      file=sys.stderr))
    except BridgeError as e:
        sys.exit("kb2bundle: %s" % e)
    print(path)


if __name__ == "__main__":
    main()
