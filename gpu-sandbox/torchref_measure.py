"""torchref_measure: what the reference process measures (see torchref.py):
check (the candidate's outputs against the expected ones, by the sandbox's
rules) and baseline (the problem's own forward timed, eager or compiled,
at the task's precision or a lower one)."""
import math
import statistics
import time
import traceback

from torchref_common import (
    ITERS_MAX, RefError, describe_exc, is_fatal_cuda, is_oom, log, share_globals)
from torchref_task import (
    GpuClock, _bits, _chunks, _draw, _need, _need_task, _to_shared)

torch = None  # PyTorch once imported (import_torch sets it here)
KERN = None   # the device kernels once compiled (set_kernels sets them here)
share_globals(globals())


def _compare(got, exp, dtype, atol, rtol):
    """docs/torchref.md's comparison, the sandbox's rules (verify.c), on the
    GPU: one kernel pass (Kernels.compare), or PyTorch operations in float64
    chunks where NVRTC is missing; ints and bools compared exactly."""
    if KERN is not None:
        return KERN.compare(got, exp, dtype, atol, rtol)
    return _compare_torch(got, exp, dtype, atol, rtol)


def _compare_torch(got, exp, dtype, atol, rtol):
    floating = dtype in ("f32", "f16", "bf16", "f64")
    if dtype == "bool":
        got, exp = got.view(torch.uint8), exp.view(torch.uint8)
    inf = float("inf")
    bad = nan = err2 = exp2 = max_abs = max_rel = None
    wscore, widx, wexp, wgot = [], [], [], []

    def acc(a, b):
        return b if a is None else a + b

    def mx(a, b):
        return b if a is None else torch.maximum(a, b)

    for lo, (gc_, ec_) in _chunks(got, exp):
        g, e = gc_.double(), ec_.double()
        if floating:
            gn, en = g.isnan(), e.isnan()
            gi, ei = g.isinf(), e.isinf()
            both_nan = gn & en
            special = (gn | en | (gi != ei)) & ~both_nan
            inf_bad = gi & ei & (g != e)
            fin = ~(gn | en | gi | ei)
            d = (g - e).abs()
            lim = atol + rtol * e.abs()
            fin_bad = fin & (d > lim)
            bad = acc(bad, (special | inf_bad | fin_bad).sum())
            nan = acc(nan, (gn & ~en).sum())
            fscore = torch.where(lim > 0, d / lim, torch.where(d > 0, inf, 0.0))
            score = torch.where(fin, fscore, torch.where(special | inf_bad, inf, 0.0))
            score = torch.where(both_nan, -1.0, score)
            dall = torch.where(fin, d, torch.where(special | inf_bad, inf, 0.0))
            rel = torch.where(fin & (e != 0), d / e.abs(), 0.0)
            dfin = torch.where(fin, d, 0.0)
            efin = torch.where(fin, e, 0.0)
        else:
            neq = gc_ != ec_
            d = (g - e).abs()
            lim = atol + rtol * e.abs()
            bad = acc(bad, neq.sum())
            score = torch.where(lim > 0, d / lim, torch.where(d > 0, inf, 0.0))
            dall = d
            rel = torch.where(e != 0, d / e.abs(), 0.0)
            dfin, efin = d, e
        max_abs = mx(max_abs, dall.max())
        max_rel = mx(max_rel, rel.max())
        err2 = acc(err2, dfin.square().sum())
        exp2 = acc(exp2, efin.square().sum())
        i = torch.argmax(score)
        # Clones: a 0-d view would keep the whole chunk's temporaries
        # alive until the end (about 96 bytes per element of the output).
        wscore.append(score[i].clone())
        widx.append(i + lo)
        wexp.append(e[i].clone())
        wgot.append(g[i].clone())
        del g, e, d, lim, score, dall, rel, dfin, efin
    n = got.numel()
    if not wscore:
        return {"count": 0, "bad": 0, "nan": 0, "worst": 0, "expected": 0.0, "got": 0.0,
                "max_abs": 0.0, "max_rel": 0.0, "err_norm": 0.0, "exp_norm": 0.0}
    scores = torch.stack(wscore)
    k = int(torch.argmax(scores).item())
    vals = torch.stack([bad.double(), (nan.double() if nan is not None else torch.zeros((), dtype=torch.float64,
                                                                                       device=got.device)),
                        max_abs, max_rel, err2, exp2, widx[k].double(), wexp[k], wgot[k]]).tolist()
    return {"count": n, "bad": int(vals[0]), "nan": int(vals[1]), "worst": int(widx[k].item()),
            "expected": vals[7], "got": vals[8], "max_abs": vals[2], "max_rel": vals[3],
            "err_norm": math.sqrt(vals[4]), "exp_norm": math.sqrt(vals[5])}


def _held_diff(got, held, dtype):
    """(largest |got - held|, elements that differ bitwise)."""
    count = None
    dmax = None
    floating = dtype in ("f32", "f16", "bf16", "f64")
    for _, (g_, h_) in _chunks(got, held):
        c = (_bits(g_, dtype) != _bits(h_, dtype)).sum()
        count = c if count is None else count + c
        g, h = g_.double(), h_.double()
        if floating:
            gn, hn = g.isnan(), h.isnan()
            d = torch.where(gn & hn, 0.0, torch.where(gn | hn, float("inf"), (g - h).abs()))
            d = torch.where(g == h, 0.0, d)  # equal infinities
        else:
            d = (g - h).abs()
        m = d.max()
        dmax = m if dmax is None else torch.maximum(dmax, m)
    if count is None:
        return 0.0, 0
    v = torch.stack([dmax, count.double()]).tolist()
    return v[0], int(v[1])


def op_check(st, req):
    t = _need_task(st, "check")
    serial = _need(req, "serial", int)
    atol = _need(req, "atol", float)
    rtol = _need(req, "rtol", float)
    if "max_rel_norm" in req:
        _need(req, "max_rel_norm", float)
    hold = bool(req.get("hold", False))
    compare_held = bool(req.get("compare_held", False))
    if st.cur is None:
        raise RefError("INTERNAL", "check of serial %d: no inputs are current (send inputs first)" % serial)
    if serial != st.cur.serial:
        raise RefError("INTERNAL", "check of serial %d: only the latest serial (%d) can be checked"
                       % (serial, st.cur.serial))
    if compare_held and st.held is None:
        raise RefError("INTERNAL", "check with compare_held but no earlier check held outputs")
    obufs = t.by_kind("output")
    torch.cuda.synchronize()
    res = []
    clock = GpuClock()
    for i, (b, e) in enumerate(zip(obufs, st.cur.expected)):
        r = {"name": b.name}
        clock.start()
        r.update(_compare(b.view, e, b.dtype, atol, rtol))
        clock.stop()
        r["held_diff_max"], r["held_diff_count"] = None, None
        if compare_held:
            r["held_diff_max"], r["held_diff_count"] = _held_diff(b.view, st.held[i], b.dtype)
        res.append(r)
    if hold:
        st.held = None
        st.held = [b.view.clone() for b in obufs]
    torch.cuda.synchronize()
    # The process's peak GPU memory so far, as baseline's: the sandbox
    # reports the largest it was told (torch.peak_gpu_bytes).
    return {"outputs": res, "gpu_ms": clock.ms(),
            "peak_bytes": int(torch.cuda.max_memory_allocated()) + t.arena_bytes}


def _stats(times, setup_s):
    return {"median_ms": statistics.median(times), "mean_ms": statistics.fmean(times),
            "min_ms": min(times), "max_ms": max(times),
            "stddev_ms": statistics.stdev(times) if len(times) > 1 else 0.0,
            "iterations": len(times), "setup_s": setup_s}


def _median_settled(times, ci):
    """The distribution-free 95 % interval of the median within ci of it on
    either side: order statistics lo and n - 1 - lo (from 0), lo =
    floor(n/2 - 1.96 sqrt(n)/2), as the sandbox's (timing.c
    ev_median_settled)."""
    n = len(times)
    if n < 2:
        return False
    x = sorted(times)
    half = 0.98 * math.sqrt(n)
    lo = max(0, int(math.floor(n / 2.0 - half)))
    hi = n - 1 - lo
    return (x[hi] - x[lo]) / 2 <= ci * statistics.median(x)


def _baseline_args(t, drawn, keep_inputs=False):
    """A timed run's arguments: the drawn values in the shared input
    buffers (the draw is freed), so a baseline needs no second copy of the
    inputs; private ones for a model that writes its inputs, or where the
    shared buffers hold a serial's inputs that must stay (keep_inputs: the
    baseline timed before the candidate runs)."""
    return drawn if t.writes_inputs or keep_inputs else _to_shared(t, drawn)


PRECISIONS = ("f32", "tf32", "f16", "bf16")


class _MathMode:
    """The forward's math mode for a matched-precision baseline: TF32 in
    matmuls and cuDNN (the flags as they were afterwards), or autocast to
    float16 / bfloat16; f32 changes nothing."""

    def __init__(self, precision):
        self.precision = precision
        self.saved = None
        self.ac = None

    def __enter__(self):
        if self.precision == "tf32":
            self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        elif self.precision in ("f16", "bf16"):
            self.ac = torch.autocast("cuda", dtype=torch.float16 if self.precision == "f16" else torch.bfloat16)
            self.ac.__enter__()
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved
        if self.ac is not None:
            self.ac.__exit__(*exc)
        return False


def op_baseline(st, req):
    t = _need_task(st, "baseline")
    mode = _need(req, "mode", str)
    warmup = _need(req, "warmup", int)
    iters = _need(req, "iters", int)
    flush = bool(req.get("flush", True))
    keep_inputs = bool(req.get("keep_inputs", False))
    seed = _need(req, "seed", int)
    precision = req.get("precision") or "f32"
    if mode not in ("eager", "compile", "max-autotune"):
        raise RefError("INTERNAL", "baseline: unknown mode %r; use eager, compile or max-autotune" % mode)
    if precision not in PRECISIONS:
        raise RefError("INTERNAL", "baseline: unknown precision %r; use one of %s"
                       % (precision, ", ".join(PRECISIONS)))
    if precision != "f32" and mode != "eager":
        raise RefError("INTERNAL", "baseline: a matched precision (%s) is timed in eager mode only"
                       % precision)
    if not 0 <= warmup <= ITERS_MAX or not 1 <= iters <= ITERS_MAX:
        raise RefError("INTERNAL", "baseline: warmup must be 0 to %d and iters 1 to %d" % (ITERS_MAX, ITERS_MAX))
    if flush and t.flush is None:
        # float32, so that its sum accumulates in its own type (a uint8
        # sum would make an int64 copy, eight times the buffer).
        t.flush = torch.empty(2 * st.hello["l2_bytes"] // 4, dtype=torch.float32, device=st.dev)
    setup_s = 0.0
    fn = t.model
    if mode != "eager":
        fn, err = t.compiled.get(mode, (None, None))
        if err is not None:
            raise RefError("COMPILE_FAILED", err)
        if fn is None:
            t0 = time.monotonic()
            try:
                fn = torch.compile(t.model) if mode == "compile" else \
                    torch.compile(t.model, mode="max-autotune")
                args = _baseline_args(t, _draw(st, seed, 0, into_arena=not keep_inputs), keep_inputs)
                with torch.no_grad():
                    fn(*args)
                del args
                torch.cuda.synchronize()
            except RefError:
                raise
            except Exception as e:
                log("torch.compile (%s) failed:\n%s" % (mode, traceback.format_exc()))
                err = "torch.compile (%s) failed: %s" % (mode, describe_exc(e, t.path))
                if is_fatal_cuda(e):
                    raise
                t.compiled[mode] = (None, err)
                raise RefError("COMPILE_FAILED", err) from e
            setup_s = time.monotonic() - t0
            t.compiled[mode] = (fn, None)
            log("torch.compile (%s): %.1f s" % (mode, setup_s))
    # Adaptive as the candidate's timing (eval.c ev_time): min_iters runs,
    # then batches until the median's 95 % interval is within ci of it, at
    # most iters runs or budget_ms.
    min_iters = req.get("min_iters")
    adaptive = isinstance(min_iters, int) and 1 <= min_iters <= iters
    batch = int(req.get("batch", 10)) if adaptive else iters
    ci = float(req.get("ci", 0.01))
    budget_s = float(req.get("budget_ms", 3000)) / 1000.0
    events = []
    times = []
    clock = GpuClock()
    try:
        t_start = time.monotonic()
        i = 0
        goal = warmup + (min_iters if adaptive else iters)
        while True:
            while i < goal:
                clock.start()
                args = _baseline_args(t, _draw(st, seed + i, 0, into_arena=not keep_inputs), keep_inputs)
                clock.stop()
                if flush:
                    # A read, as the sandbox's flush (eval.c ev_flush_l2):
                    # a fill would leave dirty lines written back inside
                    # the timed interval.
                    t.flush.sum()
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                with torch.no_grad(), _MathMode(precision):
                    out = fn(*args)
                b.record()
                clock.pairs.append((a, b))
                if i >= warmup:
                    events.append((a, b))
                del out, args
                i += 1
            torch.cuda.synchronize()
            times = [a.elapsed_time(b) for a, b in events]
            if not adaptive or len(times) >= iters or _median_settled(times, ci) \
                    or time.monotonic() - t_start > budget_s:
                break
            goal = min(warmup + iters, i + max(1, batch))
    except RefError:
        raise
    except Exception as e:
        if mode != "eager" and not is_fatal_cuda(e) and not is_oom(e):
            raise RefError("COMPILE_FAILED", "the torch.compile (%s) module failed while timed: %s"
                           % (mode, describe_exc(e, t.path))) from e
        raise RefError("INTERNAL" if is_oom(e) else "BAD_TASK",
                       "the forward failed while timed: %s" % describe_exc(e, t.path)) from e
    r = _stats(times, setup_s)
    r["precision"] = precision
    r["gpu_ms"] = clock.ms()
    # The reference process's peak GPU memory since the task was loaded.
    r["peak_bytes"] = int(torch.cuda.max_memory_allocated()) + t.arena_bytes
    return r

