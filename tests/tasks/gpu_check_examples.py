#!/usr/bin/env python3
"""Runs every shipped example's reference and hand-written candidates on a
GPU and checks each candidate against the reference on the same inputs.

For a machine with an NVIDIA GPU, its driver, NVRTC and NumPy (the GPU
suite's machine); CI has none of them, so this is not a ctest. It talks to
the driver API and NVRTC through ctypes, the same contract the sandbox
follows: NVRTC-compiled extern "C" kernels launched per plan.json, outputs
poisoned with NaN and scratch filled with garbage before every run, inputs
checked unchanged afterwards, the task's tolerance applied.

    python3 tests/tasks/gpu_check_examples.py [examples/NAME ...]

Prints one line per kernel with its median time and speed-up over the
reference, and exits non-zero if any candidate under candidates/ is wrong or
any under broken/ is not caught.
"""
import ctypes
import ctypes.util
import glob
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64,
          "i32": np.int32, "i64": np.int64, "i8": np.int8, "u8": np.uint8}


def load_lib(names):
    for name in names:
        for path in [name] + glob.glob(name):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    raise SystemExit("cannot load any of %s" % names)


cuda = load_lib(["libcuda.so.1"])
nvrtc = load_lib(["libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so*",
                  "/usr/local/cuda/lib/libnvrtc.so*",
                  "/usr/local/lib/python3*/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so*",
                  "/usr/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so*"])


def ck(rv, what):
    if rv != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(rv, ctypes.byref(name))
        raise RuntimeError("%s failed: %s" % (what, name.value))


def nvrtc_compile(src, arch):
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu",
                                    0, None, None) == 0
    inc = [p for p in ("/usr/local/cuda/include",) if os.path.isdir(p)]
    opts = [("-arch=" + arch).encode(), b"--std=c++17"] + [("-I" + p).encode() for p in inc]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rv = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    if rv != 0:
        n = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError("compile failed:\n" + log.value.decode())
    n = ctypes.c_size_t()
    assert nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n)) == 0
    cubin = ctypes.create_string_buffer(n.value)
    assert nvrtc.nvrtcGetCUBIN(prog, cubin) == 0
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin.raw


def draw(t, rng):
    shape, dt = t["shape"], DTYPES[t["dtype"]]
    init = t.get("init", {})
    d = init.get("dist")
    if d == "normal":
        a = rng.normal(init.get("mean", 0), init.get("scale", 1), shape)
    elif d == "uniform":
        a = rng.uniform(init.get("low", 0), init.get("high", 1), shape)
    elif d == "heavy_tailed":
        a = rng.standard_t(init.get("dof", 3), shape) * init.get("scale", 1)
    elif d == "zeros":
        a = np.zeros(shape)
    elif d == "ones":
        a = np.ones(shape)
    elif d == "arange":
        a = np.arange(int(np.prod(shape))).reshape(shape)
    elif d == "randint":
        a = rng.integers(int(init.get("low", 0)), int(init["high"]), shape)
    else:
        raise ValueError("dist %s" % d)
    return np.ascontiguousarray(a.astype(dt))


class Runner:
    def __init__(self):
        ck(cuda.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        ck(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        major, minor = ctypes.c_int(), ctypes.c_int()
        ck(cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev), "cc major")
        ck(cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev), "cc minor")
        self.arch = "sm_%d%d" % (major.value, minor.value)
        self.ctx = ctypes.c_void_p()
        ck(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "ctx")
        ck(cuda.cuCtxSetCurrent(self.ctx), "ctx current")
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, dev)
        self.name = name.value.decode()
        cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        cuda.cuModuleGetFunction.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p]
        cuda.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        cuda.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        cuda.cuMemsetD32_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t]
        cuda.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
        cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        cuda.cuEventElapsedTime.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]
        cuda.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        cuda.cuEventSynchronize.argtypes = [ctypes.c_void_p]

    def alloc(self, nbytes):
        p = ctypes.c_uint64()
        ck(cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(nbytes, 4))), "alloc")
        return p.value

    def load(self, src, plan):
        cubin = nvrtc_compile(src, self.arch)
        mod = ctypes.c_void_p()
        ck(cuda.cuModuleLoadData(ctypes.byref(mod), cubin), "module load")
        steps = []
        for s in plan["steps"]:
            f = ctypes.c_void_p()
            ck(cuda.cuModuleGetFunction(ctypes.byref(f), mod, s["kernel"].encode()),
               "get " + s["kernel"])
            steps.append((f, s))
        return steps

    def launch(self, steps, bufs):
        keep = []
        for f, s in steps:
            vals = []
            for a in s["args"]:
                if isinstance(a, str):
                    vals.append(ctypes.c_uint64(bufs[a]))
                else:
                    (k, v), = a.items()
                    vals.append({"i32": ctypes.c_int32, "u32": ctypes.c_uint32,
                                 "i64": ctypes.c_int64, "f32": ctypes.c_float,
                                 "f64": ctypes.c_double}[k](v))
            ptrs = (ctypes.c_void_p * max(len(vals), 1))(
                *[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
            keep.append((vals, ptrs))
            g, b = s["grid"], s["block"]
            ck(cuda.cuLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2],
                                   s.get("shared_bytes", 0), None, ptrs, None),
               "launch " + s["kernel"])

    def sync(self, what):
        ck(cuda.cuCtxSynchronize(), what)


def check_example(r, d, iters):
    task = json.load(open(os.path.join(d, "task.json")))
    ref = task["reference"]
    tol = task["tolerance"]
    rng = np.random.default_rng(task.get("seed", 1))
    host = {}
    bufs = {}
    for t in task["tensors"]:
        n = int(np.prod(t["shape"])) * np.dtype(DTYPES[t["dtype"]]).itemsize
        bufs[t["name"]] = r.alloc(n)
        if t["kind"] != "output":
            host[t["name"]] = draw(t, rng)
            a = host[t["name"]]
            ck(cuda.cuMemcpyHtoD_v2(bufs[t["name"]], a.ctypes.data, a.nbytes), "h2d")
    outs = [t for t in task["tensors"] if t["kind"] == "output"]

    def run(src, plan):
        steps = r.load(src, plan)
        sbufs = dict(bufs)
        for s in plan.get("scratch", []):
            sbufs[s["name"]] = r.alloc(s["bytes"])
        results = {}
        for t in outs:
            n = int(np.prod(t["shape"]))
            ck(cuda.cuMemsetD32_v2(bufs[t["name"]], 0x7FC00000, n), "poison")
        for s in plan.get("scratch", []):
            ck(cuda.cuMemsetD8_v2(sbufs[s["name"]], 0xFF, s["bytes"]), "garbage")
        r.launch(steps, sbufs)
        r.sync("run")
        for t in outs:
            a = np.empty(t["shape"], DTYPES[t["dtype"]])
            ck(cuda.cuMemcpyDtoH_v2(a.ctypes.data, bufs[t["name"]], a.nbytes), "d2h")
            results[t["name"]] = a
        # timing
        e0, e1 = ctypes.c_void_p(), ctypes.c_void_p()
        cuda.cuEventCreate(ctypes.byref(e0), 0)
        cuda.cuEventCreate(ctypes.byref(e1), 0)
        times = []
        for i in range(iters + 3):
            cuda.cuEventRecord(e0, None)
            r.launch(steps, sbufs)
            cuda.cuEventRecord(e1, None)
            cuda.cuEventSynchronize(e1)
            ms = ctypes.c_float()
            cuda.cuEventElapsedTime(ctypes.byref(ms), e0, e1)
            if i >= 3:
                times.append(ms.value)
        r.sync("timing")
        for s in plan.get("scratch", []):
            cuda.cuMemFree_v2(sbufs[s["name"]])
        return results, float(np.median(times))

    def digest():
        h = hashlib.sha256()
        for t in task["tensors"]:
            if t["kind"] != "output":
                a = np.empty_like(host[t["name"]])
                ck(cuda.cuMemcpyDtoH_v2(a.ctypes.data, bufs[t["name"]], a.nbytes), "d2h")
                h.update(a.tobytes())
        return h.hexdigest()

    before = digest()
    src = open(os.path.join(d, ref["source"])).read()
    plan = json.load(open(os.path.join(d, ref["plan"])))
    expected, ref_ms = run(src, plan)
    ok = True
    print("%-18s %-9s %9.4f ms" % (task["name"], "reference", ref_ms))
    for t in outs:
        if np.isnan(expected[t["name"]]).any():
            print("  reference left NaN in %s" % t["name"])
            ok = False
    cands = [(c, False) for c in sorted(glob.glob(os.path.join(d, "candidates", "*")))]
    cands += [(c, True) for c in sorted(glob.glob(os.path.join(d, "broken", "*")))]
    for cd, broken in cands:
        label = ("broken/" if broken else "") + os.path.basename(cd)
        src = open(os.path.join(cd, "kernel.cu")).read()
        plan = json.load(open(os.path.join(cd, "plan.json")))
        try:
            got, ms = run(src, plan)
        except RuntimeError as e:
            print("%-18s %-9s FAILED: %s" % (task["name"], label, e))
            ok = False
            continue
        verdict = "ok"
        for t in outs:
            e = expected[t["name"]].astype(np.float64)
            g = got[t["name"]].astype(np.float64)
            bad = ~(np.abs(g - e) <= tol["atol"] + tol["rtol"] * np.abs(e))
            rel = np.linalg.norm(g - e) / max(np.linalg.norm(e), 1e-30)
            if bad.any() or not rel <= tol["max_rel_norm"]:
                idx = np.argwhere(bad)[0] if bad.any() else None
                verdict = "WRONG %s: %d bad, rel_norm %.3g, first at %s (%r vs %r)" % (
                    t["name"], int(bad.sum()), rel, idx,
                    None if idx is None else float(g[tuple(idx)]),
                    None if idx is None else float(e[tuple(idx)]))
                if not broken:
                    ok = False
        if digest() != before:
            verdict = "WROTE ITS INPUTS"
            ok = False
        if broken:
            # A broken candidate must be caught; that it is, is the success.
            caught = verdict != "ok"
            ok &= caught
            verdict = ("caught: " if caught else "NOT CAUGHT: ") + verdict
        print("%-18s %-9s %9.4f ms  %6.2fx  %s" % (
            task["name"], label, ms, ref_ms / ms, verdict))
    for b in bufs.values():
        cuda.cuMemFree_v2(b)
    return ok


def main():
    dirs = sys.argv[1:] or sorted(glob.glob(os.path.join(ROOT, "examples", "*")))
    r = Runner()
    print("device: %s (%s)" % (r.name, r.arch))
    ok = True
    for d in dirs:
        ok &= check_example(r, d, 20)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
