"""torchref_common: what every part of the reference process shares (see
torchref.py): the protocol's constants and dtypes, its error, the log, the
description of a user's exception, and PyTorch, imported lazily."""
import math
import os
import sys
import time
import traceback




LINE_MAX = 16 << 20            # bytes per protocol line
CHUNK = 1 << 22                # elements per chunk of a reduction (bounds temporaries:
                               # a comparison needs about 80 bytes per element, so at
                               # most about 340 MB)
RAND_CHUNK = 1 << 26           # elements per chunk of a variant's random numbers (256 MB
                               # of float32 at most)
SHARED_ALIGN = 2 << 20         # the shared arena's allocation is rounded up to this
SHARED_MIN = 10 << 20          # and is at least this (PyTorch's kMinLargeAlloc)
STAGE_BYTES = 4 << 30          # staged serials' inputs and outputs together, at most
BUF_ALIGN = 256                # a shared buffer's offset in the arena
VARIANT_SALT = 0x9E3779B97F4A7C15  # the variants' generator: seed ^ salt
MASK64 = (1 << 64) - 1
NVARIANTS = 7
ITERS_MAX = 100000
FLUSH_FALLBACK = 64 << 20      # L2 size assumed where PyTorch does not say

# kclaw dtype -> (torch dtype name, bytes, integer dtype of the same size
# used for bitwise comparisons)
DTYPES = {
    "f32": ("float32", 4, "int32"), "f16": ("float16", 2, "int16"),
    "bf16": ("bfloat16", 2, "int16"), "f64": ("float64", 8, "int64"),
    "i32": ("int32", 4, "int32"), "i64": ("int64", 8, "int64"),
    "i8": ("int8", 1, "int8"), "u8": ("uint8", 1, "uint8"),
    "bool": ("bool", 1, "uint8"),
}
KINDS = ("input", "parameter", "output", "scalar")

torch = None  # the module, once imported (import_torch)
KERN = None   # the device kernels (Kernels), once compiled at hello; None: PyTorch ops

# The module globals of every part of the process that calls PyTorch or the
# device kernels: import_torch and set_kernels set their `torch` and `KERN`
# as they set this module's, so each part reads them as its own globals.
_SHARING = [globals()]


def share_globals(g):
    """Registers a part's globals() (see _SHARING): those of `torch` and
    `KERN` it defines take the current values now and every later one."""
    _SHARING.append(g)
    _set("torch", torch)
    _set("KERN", KERN)


def _set(name, value):
    for g in _SHARING:
        if name in g:
            g[name] = value


def set_kernels(k):
    _set("KERN", k)


class RefError(Exception):
    """A failure with a protocol code; the message is the reply's `error`."""

    def __init__(self, code, msg):
        Exception.__init__(self, msg)
        self.code = code
        self.msg = msg


def log(msg):
    try:
        sys.stderr.write("torchref[%d] %s %s\n" % (os.getpid(), time.strftime("%H:%M:%S"), msg))
        sys.stderr.flush()
    except Exception:
        pass


def one_line(s, limit=300):
    s = " ".join(str(s).split())
    return s if len(s) <= limit else s[:limit - 3] + "..."


def describe_exc(e, path=None):
    """'Type: first line of the message (file:line in func)': the frame is
    the last one in the problem's file when there is one, else the last."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = "%s: %s" % (type(e).__name__, one_line(msg)) if msg else type(e).__name__
    try:
        tb = traceback.extract_tb(e.__traceback__)
    except Exception:
        tb = []
    frames = [f for f in tb if path and f.filename == path] or list(tb)
    if frames:
        f = frames[-1]
        text += " (%s:%s in %s)" % (os.path.basename(f.filename), f.lineno, f.name)
    return text


def is_fatal_cuda(e):
    """A CUDA error that poisons this process's context (illegal address,
    device-side assert): every later request would fail the same way."""
    seen = 0
    while e is not None and seen < 8:
        name = type(e).__name__
        text = str(e)
        if name == "AcceleratorError" or "device-side assert" in text or \
                "illegal memory access" in text or "CUDA error: an illegal" in text or \
                "unspecified launch failure" in text:
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def is_oom(e):
    return (torch is not None and isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ()))) or \
        "CUDA out of memory" in str(e)


def user(what, fn, *args, path=None, **kw):
    """Runs the problem's own code; its failures are BAD_TASK (out of GPU
    memory is INTERNAL: the problem may be fine on a bigger GPU)."""
    try:
        return fn(*args, **kw)
    except RefError:
        raise
    except (Exception, SystemExit) as e:
        log("%s failed:\n%s" % (what, traceback.format_exc()))
        if is_oom(e):
            raise RefError("INTERNAL", "out of GPU memory in %s: %s" % (what, describe_exc(e, path))) from e
        raise RefError("BAD_TASK", "%s failed: %s; fix the problem's source" % (what, describe_exc(e, path))) from e


def sanitize(x):
    """JSON has no NaN or infinity: non-finite numbers are sent as null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: sanitize(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [sanitize(v) for v in x]
    return x


def import_torch():
    if torch is not None:
        return torch
    # Expandable segments are VMM memory, which cudaIpcGetMemHandle cannot
    # export: this process allocates with plain cudaMalloc segments.
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if "expandable_segments" in conf:
        kept = [o for o in conf.split(",") if o.strip() and not o.strip().startswith("expandable_segments")]
        if "torch" in sys.modules:
            log("warning: PyTorch was imported before torchref with PYTORCH_CUDA_ALLOC_CONF=%s; "
                "shared buffers cannot be exported from expandable segments" % conf)
        else:
            log("PYTORCH_CUDA_ALLOC_CONF=%s: dropping expandable_segments (CUDA IPC needs cudaMalloc "
                "segments)" % conf)
            if kept:
                os.environ["PYTORCH_CUDA_ALLOC_CONF"] = ",".join(kept)
            else:
                os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    try:
        import torch as t
    except Exception as e:
        raise RefError("NO_TORCH", "PyTorch does not import in %s (%s); install PyTorch with CUDA "
                       "for this Python (pip install torch), or convert the problem with "
                       "kb2bundle.py --tensors" % (sys.executable, describe_exc(e)))
    try:
        ok = t.cuda.is_available()
    except Exception as e:
        ok = False
        log("torch.cuda.is_available() raised: %s" % describe_exc(e))
    if not ok:
        raise RefError("NO_TORCH", "PyTorch %s sees no CUDA GPU (CUDA_VISIBLE_DEVICES=%r, built for "
                       "CUDA %s); run where a GPU and a CUDA build of PyTorch are"
                       % (t.__version__, os.environ.get("CUDA_VISIBLE_DEVICES"), t.version.cuda))
    _set("torch", t)
    return t

