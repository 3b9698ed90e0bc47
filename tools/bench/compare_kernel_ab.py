#!/usr/bin/env python3
"""The reference's comparison kernel (torchref_cuda.py KERNELS_CU) of two
versions on 1.6G float32 elements (6.4 GB a tensor), on the GPU with CuPy:
each one's time (median of 5 after one untimed) and whether the ten
figures (bad, nan, max_abs, max_rel, the norms' sums, the worst element)
are the same bit for bit, on noisy and on exact outputs, at three
tolerances.

    python3 tools/bench/compare_kernel_ab.py OLD_torchref_cuda.py NEW_torchref_cuda.py

e.g. OLD from `git show main:gpu-sandbox/torchref_cuda.py > /tmp/old.py`.
Exit 1 when any figure differs.
"""
import importlib.util
import os
import sys

import cupy as cp
import numpy as np

# torchref_cuda imports torchref_common from beside it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "gpu-sandbox"))

N = 1600 * 1024 * 1024


def kernels(path):
    spec = importlib.util.spec_from_file_location("trc_%d" % abs(hash(path)), path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return cp.RawModule(code=m.KERNELS_CU, options=("-std=c++17",))


def run(mod, g, e, atol, rtol, part):
    f, fin = mod.get_function("kc_cmp_f32"), mod.get_function("kc_cmp_finish")
    out = cp.empty(10, dtype=cp.float64)
    a, b = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    for r in range(6):
        a.record()
        f((1024,), (256,), (g, e, cp.uint64(N), cp.float64(atol), cp.float64(rtol), part))
        fin((1,), (256,), (part, cp.uint32(1024), out))
        b.record()
        b.synchronize()
        if r:
            ts.append(cp.cuda.get_elapsed_time(a, b))
    return sorted(ts)[2], out.get()


def main(argv):
    mods = [kernels(p) for p in argv[1:3]]
    rs = cp.random.RandomState(7)
    e = rs.standard_normal(N, dtype=cp.float32)
    g = e + rs.standard_normal(N, dtype=cp.float32) * cp.float32(1e-4)
    g[::1000003] = e[::1000003] + 0.5
    g[5] = cp.nan
    part = cp.empty(1024 * 10, dtype=cp.float64)
    ok = True
    for atol, rtol in ((1e-2, 1e-2), (1e-5, 1e-5), (0.0, 0.0)):
        for got, what in ((g, "noisy"), (e, "exact")):
            (t0, r0), (t1, r1) = (run(m, got, e, atol, rtol, part) for m in mods)
            same = np.array_equal(r0.view(np.uint64), r1.view(np.uint64))
            ok &= same
            print("%s atol %g rtol %g: old %.3f ms, new %.3f ms, same figures: %s"
                  % (what, atol, rtol, t0, t1, same))
    print("all figures the same" if ok else "FIGURES DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
