"""torchref_task: a task in the reference process (see torchref.py): the
state, hello, load (the problem's module and model, the shared arena, one
forward under the FLOP counter), unload, and inputs (the draws and
variants, the expected outputs kept here)."""
import gc
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import time

from torchref_common import (
    BUF_ALIGN, CHUNK, DTYPES, FLUSH_FALLBACK, KINDS, MASK64, NVARIANTS, RAND_CHUNK, RefError,
    SHARED_ALIGN, SHARED_MIN, STAGE_BYTES, VARIANT_SALT, describe_exc, import_torch, log, set_kernels,
    share_globals, user)
from torchref_cuda import DeviceBuffer, Driver, KC_SUMS, Kernels, torch_share

torch = None  # PyTorch once imported (import_torch sets it here)
KERN = None   # the device kernels once compiled (set_kernels sets them here)
share_globals(globals())


# ------------------------------------------------------------ the state

class Buf:
    """One declared tensor: its shared buffer (none for a scalar)."""

    def __init__(self, decl):
        self.name = decl["name"]
        self.kind = decl["kind"]
        self.dtype = decl["dtype"]
        self.shape = [int(d) for d in decl.get("shape") or [1]]
        self.source_name = decl.get("source_name") or self.name
        self.numel = 1
        for d in self.shape:
            self.numel *= d
        self.nbytes = self.numel * DTYPES[self.dtype][1] if self.dtype in DTYPES else 0
        self.raw = None    # uint8 view of its bytes in the shared arena
        self.view = None   # typed view of the declared shape
        self.handle = None
        self.offset = 0    # in the arena's allocation
        self.at = 0        # in the arena tensor


class Task:
    def __init__(self, key, init_seed, decl):
        self.key = key
        self.init_seed = init_seed
        self.decl = decl
        self.sig = json.dumps([key, init_seed, decl], sort_keys=True)
        self.bufs = []
        self.tmpdir = None
        self.path = None
        self.modname = None
        self.mod = None
        self.model = None
        self.state = None        # state_dict (its declared entries live in the arena)
        self.arena = None        # uint8 tensor: every shared buffer, nothing else
        self.arena_bytes = 0     # its size where it is outside PyTorch's allocator
        self.arena_holder = None  # its DeviceBuffer, dropped last at unload
        self.param_span = None   # (lo, hi) of the parameters in the arena
        self.param_sum = None    # their checksum as loaded
        self.private = []        # (buf, private tensor): parameters the model could
                                 # not be pointed at, copied in before every run
        self.writes_inputs = False  # the model's forward writes its inputs
        self.private_ptrs = set()
        self.scalar_names = []
        self.scalars = {}        # name -> value drawn at load
        self.ntensor_inputs = 0
        self.reply = None
        self.compiled = {}       # mode -> (module or None, error or None)
        self.flush = None
        self.warned_mutation = False

    def by_kind(self, kind):
        return [b for b in self.bufs if b.kind == kind]


class Serial:
    def __init__(self, serial, seed, variant, keep):
        self.serial = serial
        self.seed = seed
        self.variant = variant
        self.keep = keep
        self.expected = []


class Staged:
    """A serial's inputs drawn ahead (op_stage): its private values, its
    expected outputs and their norms, until inputs asks for it."""

    def __init__(self, seed, variant, keep, drawn, expected, norms, nbytes):
        self.key = (seed, variant, keep)
        self.drawn = drawn
        self.expected = expected
        self.norms = norms
        self.nbytes = nbytes


class GpuClock:
    """GPU time of a request's parts (draws, forwards, comparisons) by CUDA
    events around each, read after the request's synchronisation: the
    reply's gpu_ms, which the sandbox sums as torch.reference_gpu_ms (what
    an evaluation's wall time is compared with)."""

    def __init__(self):
        self.pairs = []
        self.a = None

    def start(self):
        self.a = torch.cuda.Event(enable_timing=True)
        self.a.record()

    def stop(self):
        b = torch.cuda.Event(enable_timing=True)
        b.record()
        self.pairs.append((self.a, b))
        self.a = None

    def ms(self):
        """After a synchronisation: the parts' sum."""
        return sum(a.elapsed_time(b) for a, b in self.pairs)


class State:
    def __init__(self):
        self.ready = False
        self.ordinal = 0
        self.dev = None
        self.hello = None
        self.driver = None
        self.ipc = None          # "driver" or "torch"
        self.task = None
        self.cur = None
        self.prev_kept = None    # expected outputs of kept serial 0, until the next kept one
        self.held = None         # outputs copied aside by check's hold
        self.fatal = False
        self.swept = False       # an unload collected and emptied the cache since
        self.staged = {}         # serial -> Staged: stage's work for a later inputs
        self.staged_bytes = 0


# --------------------------------------------------------------- helpers

def _dt(name):
    return getattr(torch, DTYPES[name][0])


def _bits(t, dtype):
    """A bitwise view of t (the integer type of the same size)."""
    return t.view(getattr(torch, DTYPES[dtype][2]))


def _kclaw_dtype(t):
    for k, (tn, _, _) in DTYPES.items():
        if t.dtype == getattr(torch, tn):
            return k
    return None


def _shape(t):
    return [int(d) for d in t.shape] or [1]


def _chunks(*ts, size=CHUNK):
    flats = [t.reshape(-1) for t in ts]
    n = flats[0].numel()
    for lo in range(0, n, size):
        yield lo, [f[lo:lo + size] for f in flats]


def _norm64(t, dtype=None):
    if KERN is not None and dtype in KC_SUMS:
        return math.sqrt(KERN.sums(t, None, dtype)[1])
    acc = None
    for _, (c,) in _chunks(t):
        s = c.double().square().sum()
        acc = s if acc is None else acc + s
    return math.sqrt(acc.item()) if acc is not None else 0.0


def _diffnorm64(a, b, dtype=None):
    if KERN is not None and dtype in KC_SUMS:
        return math.sqrt(KERN.sums(a, b, dtype)[2])
    acc = None
    for _, (x, y) in _chunks(a, b):
        s = (x.double() - y.double()).square().sum()
        acc = s if acc is None else acc + s
    return math.sqrt(acc.item()) if acc is not None else 0.0


def _need(req, field, types, what=None):
    if field not in req:
        raise RefError("INTERNAL", "%s request lacks '%s'" % (req.get("op"), field))
    v = req[field]
    if types is int and (isinstance(v, bool) or not isinstance(v, int)):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise RefError("INTERNAL", "%s request: '%s' must be an integer, not %r" % (req.get("op"), field, v))
    if types is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise RefError("INTERNAL", "%s request: '%s' must be a number, not %r" % (req.get("op"), field, v))
        return float(v)
    if types is bool:
        if not isinstance(v, bool):
            raise RefError("INTERNAL", "%s request: '%s' must be true or false, not %r" % (req.get("op"), field, v))
        return v
    if types not in (int, float, bool) and not isinstance(v, types):
        raise RefError("INTERNAL", "%s request: '%s' has the wrong type (%s)" % (req.get("op"), field,
                                                                                type(v).__name__))
    return v


def ensure_ready(st, ordinal=None):
    """Imports PyTorch and picks the device (hello does it; any other op
    before hello does it with device 0)."""
    if st.ready and (ordinal is None or ordinal == st.ordinal):
        return
    t = import_torch()
    ordinal = 0 if ordinal is None else ordinal
    n = t.cuda.device_count()
    if ordinal < 0 or ordinal >= n:
        raise RefError("NO_TORCH", "device %d is not visible here: PyTorch sees %d GPU(s) with "
                       "CUDA_VISIBLE_DEVICES=%r; start the reference with the child's "
                       "CUDA_VISIBLE_DEVICES" % (ordinal, n, os.environ.get("CUDA_VISIBLE_DEVICES")))
    if st.task is not None:
        unload(st)
    t.cuda.set_device(ordinal)
    st.ordinal = ordinal
    st.dev = t.device("cuda", ordinal)
    # FP32-accurate expected outputs: no TF32 in convolutions or matmuls
    # (PyTorch's default lets cuDNN use TF32). KCLAW_TORCHREF_TF32=1 keeps it.
    tf32 = os.environ.get("KCLAW_TORCHREF_TF32") == "1"
    t.backends.cuda.matmul.allow_tf32 = tf32
    t.backends.cudnn.allow_tf32 = tf32
    t.empty(1, device=st.dev)  # creates the context on this thread
    props = t.cuda.get_device_properties(ordinal)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    if l2 <= 0:
        l2 = FLUSH_FALLBACK
        log("PyTorch does not report the L2 size; assuming %d bytes" % l2)
    if st.driver is not None:
        st.driver.ordinal = ordinal
    else:
        try:
            st.driver = Driver(ordinal)
            st.ipc = "driver"
        except Exception as e:
            log("libcuda cannot be called through ctypes (%s); exporting buffers with PyTorch's "
                "_share_cuda_ (memory of shared buffers is not returned at unload)" % describe_exc(e))
            st.driver = None
            st.ipc = "torch"
    set_kernels(None)
    if st.driver is not None and os.environ.get("KCLAW_TORCHREF_KERNELS") != "torch":
        try:
            set_kernels(Kernels(st.driver, st.dev, t.version.cuda))
            log("device kernels: %s from %s" % (KERN.what, KERN.nvrtc))
        except Exception as e:
            log("no device kernels (%s): comparisons, norms and checksums run as PyTorch operations "
                "in chunks" % describe_exc(e))
    st.hello = {"torch": t.__version__, "device_name": t.cuda.get_device_name(ordinal),
                "l2_bytes": l2, "cuda": t.version.cuda, "tf32": tf32, "ipc": st.ipc,
                "kernels": KERN.what if KERN is not None else "torch"}
    # Everything alive now lives as long as the process (PyTorch and its
    # modules, the kernels, the FLOP counter that load uses): frozen out of
    # the collector's way, so that the full collections of unload and load
    # walk only what tasks made since, not every object PyTorch made.
    try:
        importlib.import_module("torch.utils.flop_counter")
    except Exception:
        pass  # load counts no FLOPs then, and says so
    gc.collect()
    gc.freeze()
    st.ready = True
    log("ready: PyTorch %s, CUDA %s, %s (cuda:%d), L2 %d bytes, TF32 %s, IPC via %s"
        % (t.__version__, t.version.cuda, st.hello["device_name"], ordinal, l2,
           "on" if tf32 else "off", st.ipc))


# ------------------------------------------------------------------ ops

def op_hello(st, req):
    ordinal = req.get("device", 0)
    if isinstance(ordinal, bool) or not isinstance(ordinal, int):
        raise RefError("INTERNAL", "hello: 'device' must be an integer")
    ensure_ready(st, ordinal)
    return dict(st.hello)


def _free_serials(st):
    st.cur = None
    st.prev_kept = None
    st.held = None
    st.staged = {}
    st.staged_bytes = 0


def _stepper(t0):
    """A list of "name seconds" and the function that appends the time
    since its previous call (or t0) under a name: a request's steps in the
    log."""
    steps, since = [], [t0]

    def step(name):
        now = time.monotonic()
        steps.append("%s %.3f" % (name, now - since[0]))
        since[0] = now

    return steps, step


def unload(st):
    """Frees the task: buffers, model, compiled modules, the module and its
    file; returns the GPU memory to the driver. Logs each step's time."""
    t = st.task
    _free_serials(st)
    st.task = None
    if t is None:
        return
    t0 = time.monotonic()
    steps, step = _stepper(t0)

    had_compiled = bool(t.compiled)
    for b in t.bufs:
        b.raw = b.view = None
    t.bufs = []
    t.model = t.state = t.flush = t.arena = None
    t.private = []
    t.compiled = {}
    if t.modname:
        sys.modules.pop(t.modname, None)
    t.mod = None
    if t.tmpdir:
        shutil.rmtree(t.tmpdir, ignore_errors=True)
    step("drop")
    if torch is not None:
        if had_compiled:
            try:
                torch._dynamo.reset()
            except Exception as e:
                log("torch._dynamo.reset() failed: %s" % describe_exc(e))
            step("dynamo")
        gc.collect()
        step("collect")
        # The arena's memory goes back once nothing can use it any more.
        t.arena_holder = None
        gc.collect()
        step("arena")
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            st.swept = True
        except Exception as e:
            log("freeing GPU memory failed: %s" % describe_exc(e))
        step("empty_cache")
        # What is still alive now outlives the task (what PyTorch imported
        # or cached while it ran): frozen like hello's, so the next
        # unload's collections walk only what the next task makes. Each
        # full collection cost ~0.1 s once tasks had run (the H200 log:
        # unload 0.276 s median, two of them).
        gc.freeze()
        step("freeze")
    log("unload %s: %.3f s (%s)" % (t.key[:16], time.monotonic() - t0, ", ".join(steps)))


def op_unload(st, req):
    unload(st)
    return {}


def _parse_decl(req):
    tensors = _need(req, "tensors", list)
    decl, names = [], set()
    for i, t in enumerate(tensors):
        if not isinstance(t, dict):
            raise RefError("INTERNAL", "load: tensors[%d] is not an object" % i)
        name, kind, dtype = t.get("name"), t.get("kind"), t.get("dtype")
        if not isinstance(name, str) or not name:
            raise RefError("INTERNAL", "load: tensors[%d] has no name" % i)
        if name in names:
            raise RefError("BAD_TASK", "load: tensor name '%s' is declared twice" % name)
        names.add(name)
        if kind not in KINDS:
            raise RefError("BAD_TASK", "load: tensor '%s' has kind %r; use one of %s"
                           % (name, kind, ", ".join(KINDS)))
        if kind == "scalar":
            dtype = dtype or "f32"
            if dtype not in ("f32", "f64", "i32", "i64"):
                raise RefError("BAD_TASK", "load: scalar '%s' has dtype %r; use f32 or i64" % (name, dtype))
        elif dtype not in DTYPES:
            raise RefError("BAD_TASK", "load: tensor '%s' has dtype %r; use one of %s"
                           % (name, dtype, ", ".join(DTYPES)))
        shape = t.get("shape") or [1]
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                  and d > 0 for d in shape):
            raise RefError("BAD_TASK", "load: tensor '%s' has shape %r; give positive integers"
                           % (name, shape))
        d = {"name": name, "kind": kind, "dtype": dtype, "shape": shape}
        if t.get("source_name"):
            d["source_name"] = str(t["source_name"])
        decl.append(d)
    if not any(d["kind"] == "output" for d in decl):
        raise RefError("BAD_TASK", "load: no tensor has kind output")
    scal = [d["name"] for d in decl if d["kind"] == "scalar"]
    listed = req.get("scalars")
    if listed is not None:
        if not isinstance(listed, list) or not all(isinstance(s, str) for s in listed):
            raise RefError("INTERNAL", "load: 'scalars' must be a list of names")
        if scal and listed != scal:
            raise RefError("INTERNAL", "load: 'scalars' %r differs from the tensors of kind scalar %r"
                           % (listed, scal))
        if not scal:
            for s in listed:  # scalars named only in the list
                if s in names:
                    raise RefError("BAD_TASK", "load: scalar '%s' is also a tensor" % s)
                decl.append({"name": s, "kind": "scalar", "dtype": "f32", "shape": [1]})
    return decl


def _alloc_shared(st, t):
    """Every shared buffer in one arena: a single allocation of the
    driver's own (cuMemAlloc, rounded up to 2 MiB), never a block of
    PyTorch's caching allocator, whose segments may also hold private
    tensors (the IPC handle exposes a whole allocation; checked with
    cuMemGetAddressRange). Inputs first, then parameters (one contiguous
    span, checksummed), then outputs, each at a 256-byte boundary. One
    allocation instead of one per buffer: a Level 3 model has up to 628
    parameters, which each took a 10 MiB segment, and a long-lived process
    could not always get a segment of its own from the caching allocator.
    Where libcuda cannot be called, PyTorch allocates it (at least 10 MiB,
    so that it is a segment of its own) and _share_cuda_ exports it."""
    order = [b for k in ("input", "parameter", "output") for b in t.bufs if b.kind == k]
    off = 0
    plo = phi = None
    for b in order:
        off = (off + BUF_ALIGN - 1) // BUF_ALIGN * BUF_ALIGN
        b.at = off
        if b.kind == "parameter":
            plo = off if plo is None else plo
        off += max(b.nbytes, 1)
        if b.kind == "parameter":
            phi = (off + 7) // 8 * 8
    size = (off + SHARED_ALIGN - 1) // SHARED_ALIGN * SHARED_ALIGN
    if st.driver is not None:
        # An allocation of the driver's own: PyTorch's caching allocator
        # would give a block of a segment that may hold private tensors.
        t.arena_holder = DeviceBuffer(st.driver, size)
        arena = torch.as_tensor(t.arena_holder, device=st.dev)
        arena.zero_()
        handle, offset, seg = st.driver.share(arena.data_ptr())
        if offset != 0 or seg < size:
            raise RefError("INTERNAL", "the shared arena is at offset %d of a %d-byte allocation "
                           "(%d asked)" % (offset, seg, size))
        t.arena_bytes = size
    else:
        size = max(size, SHARED_MIN)
        arena = torch.zeros(size, dtype=torch.uint8, device=st.dev)
        handle, offset, seg = torch_share(arena)
        t.arena_bytes = 0  # counted by PyTorch's allocator
    t.arena = arena
    t.param_span = (plo, phi) if plo is not None else None
    for b in order:
        b.raw = arena[b.at:b.at + b.nbytes]
        b.view = b.raw.view(_dt(b.dtype)).view(b.shape)
        b.handle = handle.hex()
        b.offset = int(offset) + b.at


def _checksum(raw):
    """Two sums of a byte range read as int64 words (plain and weighted by
    position, wrapping): any write to the range changes them but by a
    vanishing chance. The range's length is a multiple of 8."""
    w = raw.view(torch.int64)
    if KERN is not None:
        return KERN.checksum(w)
    s1 = s2 = None
    for lo, (c,) in _chunks(w):
        idx = torch.arange(lo + 1, lo + 1 + c.numel(), dtype=torch.int64, device=c.device)
        a, b = c.sum(), (c * idx).sum()
        s1 = a if s1 is None else s1 + a
        s2 = b if s2 is None else s2 + b
    if s1 is None:
        return (0, 0)
    return tuple(int(v) for v in torch.stack([s1, s2]).tolist())


def _buf_sum(t, b):
    """A buffer's checksum (its bytes padded to a word with the arena's
    zeros: buffers start at 256-byte boundaries)."""
    return _checksum(t.arena[b.at:b.at + (b.nbytes + 7) // 8 * 8])


def _param_sum(t):
    if t.param_span is None:
        return (0, 0)
    lo, hi = t.param_span
    return _checksum(t.arena[lo:hi])


def _point_model_at_arena(t):
    """Makes the model compute with the shared parameter buffers: each
    declared state_dict entry's values are copied into its buffer and the
    module's tensor is pointed at it, so the weights exist once. An entry
    that is not a module's parameter or buffer (custom state) keeps a
    private copy, copied into its buffer before every run."""
    for b in t.by_kind("parameter"):
        src = t.state[b.source_name]
        b.view.copy_(src.reshape(b.shape))
        path, _, attr = b.source_name.rpartition(".")
        try:
            m = t.model.get_submodule(path) if path else t.model
        except Exception:
            m = None
        cur = getattr(m, attr, None) if m is not None else None
        if isinstance(cur, torch.nn.Parameter) and cur.dtype == b.view.dtype and \
                list(cur.shape or [1]) == b.shape:
            cur.data = b.view.view(cur.shape)
        elif m is not None and attr in getattr(m, "_buffers", {}) and isinstance(cur, torch.Tensor) \
                and cur.dtype == b.view.dtype and list(cur.shape or [1]) == b.shape:
            m._buffers[attr] = b.view.view(cur.shape)
        else:
            t.private.append((b, src))
    if t.private:
        log("%d parameter(s) are not module parameters or buffers and keep a private copy: %s"
            % (len(t.private), ", ".join(b.name for b, _ in t.private[:8])))
    t.state = t.model.state_dict()
    t.private_ptrs = set()
    for v in t.state.values():
        if isinstance(v, torch.Tensor) and v.numel() > 0:
            t.private_ptrs.add(v.untyped_storage().data_ptr())
    t.private_ptrs.add(t.arena.untyped_storage().data_ptr())


def _rebuild_params(st, t):
    """The shared parameters changed (a candidate wrote them, or the model
    writes its own state): a fresh model under the recorded seed, whose
    values go into the shared buffers."""
    torch.manual_seed(t.init_seed & MASK64)
    with torch.device(st.dev):
        init = user("get_init_inputs()", t.mod.get_init_inputs, path=t.path)
        fresh = user("Model(*get_init_inputs())", lambda: t.mod.Model(*init), path=t.path)
    fresh = fresh.to(st.dev)
    sd = fresh.state_dict()
    for b in t.by_kind("parameter"):
        b.view.copy_(sd[b.source_name].reshape(b.shape))
    del fresh, sd
    gc.collect()


def _restore_params(st, t):
    """Before every run: the private entries copied in; the shared ones
    checked against their checksum at load and rebuilt when they differ."""
    for b, src in t.private:
        b.view.copy_(src.reshape(b.shape))
    if t.param_sum is not None and _param_sum(t) != t.param_sum:
        log("the shared parameters changed since load; rebuilding them from the recorded seed")
        _rebuild_params(st, t)
        if _param_sum(t) != t.param_sum:
            raise RefError("BAD_TASK", "the model's parameters differ after rebuilding them under the "
                           "recorded seed: Model() is not deterministic; fix the problem's source")


def _check_tensor(b, actual, what):
    dt = _kclaw_dtype(actual)
    shape = _shape(actual)
    if dt != b.dtype or shape != b.shape:
        raise RefError("BAD_TASK", "%s %s '%s': declared %s%s but the problem gives %s%s; convert "
                       "the problem again (kb2bundle.py)"
                       % (b.kind, what, b.name, b.dtype, b.shape, dt or str(actual.dtype), shape))


def _split_inputs(t, vals, where):
    """Matches get_inputs()' values with the declared inputs (tensors, by
    position among the tensors) and scalars (by position among the rest)."""
    ins, scal = t.by_kind("input"), t.by_kind("scalar")
    tens = [v for v in vals if isinstance(v, torch.Tensor)]
    rest = [v for v in vals if not isinstance(v, torch.Tensor)]
    if len(tens) != len(ins) or len(rest) != len(scal):
        raise RefError("BAD_TASK", "%s: get_inputs() returned %d tensors and %d other values but the "
                       "task declares %d inputs and %d scalars; convert the problem again"
                       % (where, len(tens), len(rest), len(ins), len(scal)))
    for b, v in zip(scal, rest):
        if isinstance(v, bool):
            v = int(v)
        if not isinstance(v, (int, float)):
            try:
                v = v.item() if hasattr(v, "item") else float(v)
            except Exception:
                raise RefError("BAD_TASK", "%s: get_inputs() value for scalar '%s' is a %s; only numbers "
                               "can be scalars" % (where, b.name, type(v).__name__))
        if b.dtype in ("i32", "i64") and isinstance(v, float) and not v.is_integer():
            raise RefError("BAD_TASK", "%s: scalar '%s' is declared %s but get_inputs() gives %r"
                           % (where, b.name, b.dtype, v))
    return tens, rest


def _scalar_value(b, v):
    if isinstance(v, bool):
        return int(v)
    if hasattr(v, "item") and not isinstance(v, (int, float)):
        v = v.item()
    if b.dtype in ("i32", "i64"):
        return int(v)
    return float(v)


FACTORIES = ("rand", "randn", "randint", "zeros", "ones", "empty", "full")


def _in_arena(t, v):
    if t.arena is None or v.numel() == 0:
        return False
    lo = t.arena.data_ptr()
    return lo <= v.data_ptr() < lo + t.arena.numel()


class _IntoArena:
    """While get_inputs() runs: a factory call (torch.rand, randn, ...)
    whose tensor has the shape and dtype of the next input buffer not yet
    given out is made with out= that buffer, so the usual case (get_inputs
    returns factories' tensors) draws straight into the shared inputs with
    no second copy. The same random numbers either way (out= consumes the
    generator as the plain call does); anything else runs as called, and
    a value that is not its own buffer is copied (_to_shared)."""

    def __init__(self, t):
        from torch.overrides import TorchFunctionMode

        bufs = t.by_kind("input")
        funcs = {getattr(torch, n) for n in FACTORIES}

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func not in funcs or "out" in kwargs or not bufs or \
                        kwargs.get("requires_grad") or \
                        str(kwargs.get("device", "cuda")).split(":")[0] != "cuda":
                    return func(*args, **kwargs)
                try:
                    m = func(*args, **dict(kwargs, device="meta"))
                except Exception:
                    return func(*args, **kwargs)
                b = bufs[0]
                if list(m.shape or [1]) != b.shape or m.dtype != b.view.dtype:
                    return func(*args, **kwargs)
                bufs.pop(0)
                kw = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory", "layout")}
                try:
                    return func(*args, out=b.view.view(m.shape), **kw)
                except (TypeError, RuntimeError):
                    # Refused before drawing (the arguments' checks): the
                    # plain call, whose tensor is then copied.
                    return func(*args, **kwargs)

        self.mode = Mode()


def _draw(st, seed, variant, into_arena=False):
    """get_inputs() under torch.manual_seed(seed) and torch.device(cuda),
    then variant's transform: the list of values (tensors contiguous on the
    GPU, each its own memory, detached). With into_arena, factories' tensors
    are made in the shared input buffers where they fit (_IntoArena)."""
    t = st.task
    torch.manual_seed(seed & MASK64)
    with torch.device(st.dev):
        if into_arena and not t.writes_inputs and t.arena is not None:
            with _IntoArena(t).mode:
                vals = user("get_inputs()", t.mod.get_inputs, path=t.path)
        else:
            vals = user("get_inputs()", t.mod.get_inputs, path=t.path)
    if not isinstance(vals, (list, tuple)):
        raise RefError("BAD_TASK", "get_inputs() returned a %s; return a list of the forward's "
                       "arguments" % type(vals).__name__)
    out, seen = [], set()
    for v in vals:
        if isinstance(v, torch.Tensor):
            v = v.detach()
            if v.device != st.dev:
                v = v.to(st.dev)
            v = v.contiguous()
            if v.numel() > 0:
                # Arena buffers share one storage but never overlap.
                p = v.data_ptr() if _in_arena(t, v) else v.untyped_storage().data_ptr()
                if p in seen:
                    v = v.clone()
                seen.add(p)
        out.append(v)
    if variant:
        gen = torch.Generator(device=st.dev)
        gen.manual_seed((seed ^ VARIANT_SALT) & MASK64)
        for v in out:
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel() > 0:
                _transform(st, v, variant, gen)
    return out


def _transform(st, x, variant, gen):
    """The distribution variants of docs/torchref.md, in place, in chunks."""
    flat = x.view(-1)
    n = flat.numel()
    if variant == 1:
        flat.mul_(4)
    elif variant == 2:
        kd = _kclaw_dtype(flat)
        if KERN is not None and kd in KC_SUMS:
            s1, s2, _ = KERN.sums(flat, None, kd)
        else:
            s1 = s2 = None
            for _, (c,) in _chunks(flat, size=RAND_CHUNK):
                c64 = c.double()
                a, b = c64.sum(), c64.square().sum()
                s1 = a if s1 is None else s1 + a
                s2 = b if s2 is None else s2 + b
            s1, s2 = s1.item(), s2.item()
        var = (s2 - s1 * s1 / n) / (n - 1) if n > 1 else 0.0
        std = math.sqrt(var) if var > 0 and math.isfinite(var) else 0.0
        flat.add_(0.5 * std)
    elif variant == 3:
        for _, (c,) in _chunks(flat, size=RAND_CHUNK):
            u = torch.rand(c.numel(), generator=gen, device=st.dev, dtype=torch.float32)
            c.mul_(u < 0.25)
    elif variant == 4:
        for _, (c,) in _chunks(flat, size=RAND_CHUNK):
            g = torch.randn(c.numel(), generator=gen, device=st.dev, dtype=torch.float32)
            c.mul_(g.mul_(0.75).exp_())
    elif variant == 5:
        lo = flat.min().item()
        if lo >= 0:
            hi = flat.max().item()
            if hi > 0 and math.isfinite(hi):
                for _, (c,) in _chunks(flat, size=RAND_CHUNK):
                    c.copy_(c.float().square_().div_(hi))
        else:
            for _, (c,) in _chunks(flat, size=RAND_CHUNK):
                u = torch.rand(c.numel(), generator=gen, device=st.dev, dtype=torch.float32)
                sign = (u < 0.1).to(torch.float32).mul_(-2).add_(1)
                c.abs_().mul_(sign)
    elif variant == 6:
        flat.mul_(0.01)


def _outputs_of(result, where):
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)) and result and all(isinstance(r, torch.Tensor) for r in result):
        return list(result)
    raise RefError("BAD_TASK", "%s: forward returned %s; return a tensor or a tuple of tensors"
                   % (where, type(result).__name__))


def _forward(st, args, where):
    t = st.task
    with torch.no_grad():
        res = user("forward (%s)" % where, t.model, *args, path=t.path)
    return _outputs_of(res, where)


def _own_outputs(st, outs, args):
    """Expected outputs as tensors of their own: a result that shares
    storage with an input, a weight or another result is cloned."""
    t = st.task
    taken = set(t.private_ptrs)
    for a in args:
        if isinstance(a, torch.Tensor) and a.numel() > 0:
            taken.add(a.untyped_storage().data_ptr())
    res = []
    for o in outs:
        o = o.detach()
        p = o.untyped_storage().data_ptr() if o.numel() > 0 else None
        if p is not None and p in taken:
            o = o.clone()
            p = o.untyped_storage().data_ptr()
        o = o.contiguous()
        if p is not None:
            taken.add(o.untyped_storage().data_ptr())
        res.append(o)
    return res


def _to_shared(t, vals):
    """The drawn values with every tensor in its shared input buffer and
    replaced by that buffer (scalars stay as drawn): copied, unless it was
    drawn there (_IntoArena). A tensor in the arena but not in its own
    buffer is cloned first, before any copy can overwrite it."""
    ibufs = t.by_kind("input")
    tens = [v for v in vals if isinstance(v, torch.Tensor)]
    for i, (b, v) in enumerate(zip(ibufs, tens)):
        if _in_arena(t, v) and v.data_ptr() != b.view.data_ptr():
            tens[i] = v.clone()
    for b, v in zip(ibufs, tens):
        if v.data_ptr() != b.view.data_ptr() or v.numel() != b.view.numel():
            b.view.copy_(v.reshape(b.shape))
    out, k = [], 0
    for v in vals:
        if isinstance(v, torch.Tensor):
            v = ibufs[k].view.view(v.shape)
            k += 1
        out.append(v)
    return out


def op_load(st, req):
    ensure_ready(st)
    key = _need(req, "key", str)
    source = _need(req, "source", str)
    init_seed = _need(req, "init_seed", int)
    decl = _parse_decl(req)
    sig = json.dumps([key, init_seed, decl], sort_keys=True)
    if st.task is not None and st.task.sig == sig and st.task.reply is not None:
        _free_serials(st)
        log("load %s: already loaded, reusing the model and buffers" % key[:16])
        return dict(st.task.reply)
    if st.task is not None:
        unload(st)
    t0 = time.monotonic()
    t = Task(key, init_seed, decl)
    t.bufs = [Buf(d) for d in decl]
    st.task = t
    try:
        return _load(st, t, source, t0)
    except BaseException:
        unload(st)
        raise


def _load(st, t, source, t0):
    # Where a load's time goes, step by step (host time: GPU work shows in
    # the step that waits for it), for its log line.
    steps, step = _stepper(t0)

    # Shared buffers first, while the cache is empty: the arena is a fresh
    # cudaMalloc segment of its own. The peak memory counts from here. An
    # unload just before (a new problem's load) has collected and emptied
    # the cache already: a second pass cost ~0.1 s of every such load.
    if not st.swept:
        gc.collect()
        torch.cuda.empty_cache()
    st.swept = False
    torch.cuda.reset_peak_memory_stats()
    _alloc_shared(st, t)
    step("arena")

    # The problem as a module from a file, so inspect and torch.compile
    # find its source.
    tag = "".join(c for c in t.key[:16] if c.isalnum()) or "x"
    t.tmpdir = tempfile.mkdtemp(prefix="torchref-")
    t.path = os.path.join(t.tmpdir, "problem_%s.py" % tag)
    with open(t.path, "w") as f:
        f.write(source)
    t.modname = "kclaw_problem_%s" % tag
    spec = importlib.util.spec_from_file_location(t.modname, t.path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[t.modname] = mod
    user("the problem's module", spec.loader.exec_module, mod, path=t.path)
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, attr):
            raise RefError("BAD_TASK", "the problem defines no %s; a KernelBench problem defines class "
                           "Model, get_inputs() and get_init_inputs()" % attr)
    t.mod = mod
    step("module")

    torch.manual_seed(t.init_seed & MASK64)
    with torch.device(st.dev):
        init = user("get_init_inputs()", mod.get_init_inputs, path=t.path)
        if not isinstance(init, (list, tuple)):
            raise RefError("BAD_TASK", "get_init_inputs() returned a %s; return a list of Model's "
                           "arguments" % type(init).__name__)
        model = user("Model(*get_init_inputs())", lambda: mod.Model(*init), path=t.path)
    if not hasattr(model, "eval") or not hasattr(model, "state_dict"):
        raise RefError("BAD_TASK", "Model is not a torch.nn.Module")
    model = user("Model.to(cuda).eval()", lambda: model.to(st.dev).eval(), path=t.path)
    t.model = model
    t.state = model.state_dict()
    for v in t.state.values():
        if isinstance(v, torch.Tensor) and v.numel() > 0:
            t.private_ptrs.add(v.untyped_storage().data_ptr())
    for b in t.by_kind("parameter"):
        if b.source_name not in t.state:
            some = ", ".join(list(t.state)[:8]) or "none"
            raise RefError("BAD_TASK", "parameter '%s': the model's state_dict has no entry '%s' "
                           "(it has %s); convert the problem again" % (b.name, b.source_name, some))
        _check_tensor(b, t.state[b.source_name], "tensor")
    undeclared = [k for k in t.state if k not in {b.source_name for b in t.by_kind("parameter")}]
    if undeclared:
        log("state_dict entries not declared (the candidate does not get them): %s"
            % ", ".join(undeclared[:10]))

    step("model")
    # The weights live in the arena from now on (once).
    _point_model_at_arena(t)
    t.param_sum = _param_sum(t)
    step("weights")

    # One draw to check the inputs, the outputs and count the FLOPs; the
    # forward runs on the shared inputs, as every later one (drawn there:
    # no second copy of the inputs, at load either).
    clock = GpuClock()
    clock.start()
    drawn = _draw(st, t.init_seed, 0, into_arena=True)
    clock.stop()
    tens, rest = _split_inputs(t, drawn, "load")
    for b, v in zip(t.by_kind("input"), tens):
        _check_tensor(b, v, "tensor")
    for b, v in zip(t.by_kind("scalar"), rest):
        t.scalars[b.name] = _scalar_value(b, v)
    args = _to_shared(t, drawn)
    del drawn, tens
    before = [_buf_sum(t, b) for b in t.by_kind("input")]
    step("inputs")
    # The FLOP counter runs the forward itself; where the counter (or the
    # forward) fails, the forward runs again without it and its own
    # failure is the problem's.
    flops = None
    outs = None
    clock.start()
    try:
        from torch.utils.flop_counter import FlopCounterMode
        fc = FlopCounterMode(display=False)
        with fc:
            with torch.no_grad():
                res = t.model(*args)
        outs = _outputs_of(res, "load")
        del res
        flops = float(fc.get_total_flops())
    except RefError:
        raise
    except Exception as e:
        log("FLOP counting failed (%s); running the forward without it" % describe_exc(e, t.path))
        outs = None
        gc.collect()
        args = _to_shared(t, _draw(st, t.init_seed, 0, into_arena=True))
    if outs is None:
        outs = _forward(st, args, "load")
    clock.stop()
    step("forward")
    # A model whose forward writes its inputs gets private copies for its
    # forward (the candidate must see them as drawn): found here, once, by
    # the inputs' checksums around the forward.
    written = [b.name for b, h in zip(t.by_kind("input"), before) if _buf_sum(t, b) != h]
    if written:
        t.writes_inputs = True
        log("the model writes its input(s) %s in forward; its forward gets private copies"
            % ", ".join(written))
    del rest
    obufs = t.by_kind("output")
    if len(outs) != len(obufs):
        raise RefError("BAD_TASK", "forward returned %d tensors but the task declares %d outputs; "
                       "convert the problem again" % (len(outs), len(obufs)))
    for b, o in zip(obufs, outs):
        _check_tensor(b, o, "tensor")
    del outs, args
    _restore_params(st, t)
    torch.cuda.synchronize()
    step("checks")
    t.reply = {
        "buffers": [{"name": b.name, "handle": b.handle, "offset": b.offset, "bytes": b.nbytes}
                    for b in t.bufs if b.kind != "scalar"],
        "scalars": dict(t.scalars),
        "flops": flops,
    }
    log("load %s: %d tensors, %.1f MB shared in one %.1f MB arena, %s FLOPs, %.2f s (%s)"
        % (t.key[:16], len(t.bufs), sum(b.nbytes for b in t.bufs) / 1e6, t.arena.numel() / 1e6,
           "%.3g" % flops if flops is not None else "no", time.monotonic() - t0, ", ".join(steps)))
    return dict(t.reply, gpu_ms=clock.ms())


def _need_task(st, op):
    if st.task is None or st.task.reply is None:
        raise RefError("INTERNAL", "%s before load: no task is loaded" % op)
    return st.task


def _serial_req(req):
    serial = _need(req, "serial", int)
    seed = _need(req, "seed", int)
    variant = _need(req, "variant", int)
    keep = bool(req.get("keep", False))
    if not 0 <= variant < NVARIANTS:
        raise RefError("INTERNAL", "%s: unknown variant %d (0 to %d)"
                       % (req.get("op"), variant, NVARIANTS - 1))
    return serial, seed, variant, keep


def _expect(st, clock, seed, variant, keep, into_arena):
    """A serial's draw (into the shared input buffers with into_arena, else
    into tensors of its own), its forward and its expected outputs with their
    norms: (drawn values, expected, the reply's outputs). The draw and then
    the forward with the norms (the comparisons' GPU work) are timed by
    clock; the checks between them are host time."""
    t = st.task
    clock.start()
    drawn = _draw(st, seed, variant, into_arena=into_arena)
    clock.stop()
    tens, rest = _split_inputs(t, drawn, "inputs")
    for b, v in zip(t.by_kind("scalar"), rest):
        if _scalar_value(b, v) != t.scalars.get(b.name):
            raise RefError("BAD_TASK", "scalar '%s' is %r for seed %d but was %r at load: a scalar must "
                           "not depend on the seed" % (b.name, v, seed, t.scalars.get(b.name)))
    for b, v in zip(t.by_kind("input"), tens):
        _check_tensor(b, v, "tensor")
    del tens, rest
    # The expected outputs are computed before the candidate runs, on the
    # very inputs it will get: nothing the candidate writes later can
    # change them.
    clock.start()
    args = drawn
    if into_arena:
        shared = _to_shared(t, drawn)
        if not t.writes_inputs:
            # What was drawn outside the arena is freed before the forward.
            args, drawn = shared, None
        del shared
    outs = _forward(st, args, "inputs, seed %d" % seed)
    obufs = t.by_kind("output")
    if len(outs) != len(obufs):
        raise RefError("BAD_TASK", "forward returned %d tensors for seed %d but the task declares %d "
                       "outputs" % (len(outs), seed, len(obufs)))
    for b, o in zip(obufs, outs):
        _check_tensor(b, o, "tensor")
    exp = [o.reshape(b.shape) for b, o in zip(obufs, _own_outputs(st, outs, args))]
    del outs, args
    res = []
    for b, e in zip(obufs, exp):
        var = None
        if keep and st.prev_kept is not None:
            var = _diffnorm64(e, st.prev_kept[len(res)], b.dtype)
        # The norms are read for kept serials only (the variation rule):
        # a timed run's inputs skip that pass over its outputs.
        res.append({"name": b.name, "exp_norm": _norm64(e, b.dtype) if keep else None, "var_norm": var})
    clock.stop()
    return drawn, exp, res


def _keep_prev(st, serial, keep, exp):
    # Only kept serial 0's outputs are held, until the next serial (the
    # variation between trials 0 and 1): one more output copy at most.
    st.prev_kept = exp if keep and serial == 0 else None


def op_stage(st, req):
    """What inputs will do for this serial, done ahead into tensors of the
    reference's own (docs/torchref.md "Staged serials"): the draw, the
    forward, the expected outputs and their norms. The sandbox sends these
    while it compiles the candidate and reads every reply before the
    candidate first runs, so the model ran on its parameters as loaded;
    inputs then only copies the values into the shared buffers. Not staged
    (staged: false) where the model writes its inputs or the staged serials
    would pass STAGE_BYTES or a quarter of the GPU's free memory."""
    t = _need_task(st, "stage")
    serial, seed, variant, keep = _serial_req(req)
    need = sum(b.nbytes for b in t.bufs if b.kind in ("input", "output"))
    free = torch.cuda.mem_get_info(st.dev)[0]
    if t.writes_inputs or serial in st.staged or \
            st.staged_bytes + need > min(STAGE_BYTES, free // 4):
        return {"staged": False, "gpu_ms": 0.0}
    _restore_params(st, t)
    clock = GpuClock()
    drawn, exp, res = _expect(st, clock, seed, variant, keep, into_arena=False)
    _keep_prev(st, serial, keep, exp)
    torch.cuda.synchronize()
    st.staged[serial] = Staged(seed, variant, keep, drawn, exp, res, need)
    st.staged_bytes += need
    return {"staged": True, "gpu_ms": clock.ms()}


def op_inputs(st, req):
    t = _need_task(st, "inputs")
    serial, seed, variant, keep = _serial_req(req)
    staged = st.staged.pop(serial, None)
    if staged is not None:
        st.staged_bytes -= staged.nbytes
        if staged.key != (seed, variant, keep):
            staged = None
    # The previous serial's expected outputs go first (kept serial 0's
    # stay for var_norm).
    st.cur = None
    _restore_params(st, t)
    clock = GpuClock()
    if staged is not None:
        clock.start()
        _to_shared(t, staged.drawn)
        clock.stop()
        exp, res = staged.expected, staged.norms
        staged = None
    else:
        drawn, exp, res = _expect(st, clock, seed, variant, keep, into_arena=True)
        del drawn
    cur = Serial(serial, seed, variant, keep)
    cur.expected = exp
    _keep_prev(st, serial, keep, exp)
    # The shared outputs are not poisoned here: the sandbox poisons them
    # before every run of the candidate (ev_poison), the same all-ones
    # bytes; a second pass cost 1.6 ms per run on a 6.4 GB output.
    torch.cuda.synchronize()
    st.cur = cur
    return {"outputs": res, "gpu_ms": clock.ms()}

