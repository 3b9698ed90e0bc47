#!/usr/bin/env python3
"""The reference process's device kernels (gpu-sandbox/torchref_cuda.py,
KERNELS_CU) without a GPU or PyTorch:

1. the source compiles with NVRTC for sm_90, through torchref's own loader
   (nvrtc_compile), as it does at hello on the GPU machine;
2. the element rules and the merge of partials, built for the host (C++,
   KC_HOST_TEST), give on a grid of special values (NaN, infinities,
   zeros, tiny and huge numbers, both signs) and tolerances (zero ones
   too) exactly what the PyTorch path of check computes
   (_compare_torch, transcribed below element by element): bad, nan,
   max_abs, max_rel, the norms' sums and the worst element, ties going to
   the lowest index; also over long runs of finite values, where the
   kernel makes a division only where it can raise a maximum.

Exit 0 when all hold; 77 (skipped) where neither NVRTC nor a C++ compiler
is found.
"""
import itertools
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "gpu-sandbox"))
import torchref_cuda  # noqa: E402  (imports no PyTorch)

INF = float("inf")
NAN = float("nan")
VALUES = [0.0, -0.0, 1.0, -1.0, 1.005, 0.5, 1e-3, -2.5, 3e38, -3e38, 1e300, INF, -INF, NAN]
TOLS = [(1e-2, 1e-2), (0.0, 0.0), (0.0, 1e-2), (1e-5, 0.0)]

HARNESS = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#define __device__
#define __forceinline__ inline
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
static inline float __uint_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }
#include "kernels.cu"
static void show(const kc_acc &a) {
  printf("%.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g\n", a.bad, a.nan, a.mabs,
         a.mrel, a.err2, a.exp2, a.ws, a.wi, a.we, a.wg);
}
int main() {
  int nt, nv, ni;
  if (scanf("%d %d", &nt, &nv) != 2) return 1;
  double tol[16][2], v[64];
  for (int i = 0; i < nt; i++) scanf("%lf %lf", &tol[i][0], &tol[i][1]);
  for (int i = 0; i < nv; i++) {
    unsigned long long b;
    scanf("%llx", &b);
    memcpy(&v[i], &b, 8);
  }
  /* Each pair alone (element i = 0). */
  for (int t = 0; t < nt; t++)
    for (int g = 0; g < nv; g++)
      for (int e = 0; e < nv; e++) {
        kc_acc a;
        kc_acc_init(a);
        kc_elem_float(a, v[g], v[e], 0, tol[t][0], tol[t][1]);
        show(a);
      }
  /* Sequences split in two "blocks" and merged: element k is pair k of
   * the list, in blocks of alternating elements (grid-stride order). */
  if (scanf("%d", &ni) != 1) return 1;
  for (int t = 0; t < nt; t++) {
    kc_acc blk[2];
    kc_acc_init(blk[0]);
    kc_acc_init(blk[1]);
    for (int k = 0; k < ni; k++) {
      int g = k % nv, e = (k * 7 + 3) % nv;
      kc_elem_float(blk[k % 2], v[g], v[e], (unsigned long long)k, tol[t][0], tol[t][1]);
    }
    kc_acc_merge(blk[0], blk[1]);
    show(blk[0]);
  }
  /* Finite values only, in longer runs: the scores and relative errors
   * grow and shrink, so the divisions skipped where they cannot raise a
   * maximum must leave the same figures and the same worst element. */
  {
    double f[64];
    int nf = 0;
    for (int i = 0; i < nv; i++)
      if (std::isfinite(v[i])) f[nf++] = v[i];
    for (int t = 0; t < nt; t++) {
      kc_acc blk[2];
      kc_acc_init(blk[0]);
      kc_acc_init(blk[1]);
      for (int k = 0; k < 7 * nf; k++)
        kc_elem_float(blk[k % 2], f[k % nf], f[(k * 5 + 2) % nf], (unsigned long long)k,
                      tol[t][0], tol[t][1]);
      kc_acc_merge(blk[0], blk[1]);
      show(blk[0]);
    }
    /* Errors of close sizes, rising and falling: each new worst element
     * is only a little worse than the one before. */
    for (int t = 0; t < nt; t++) {
      kc_acc blk[2];
      kc_acc_init(blk[0]);
      kc_acc_init(blk[1]);
      for (int k = 0; k < 200; k++) {
        double e = 1.0 + k * 0.01, g = e + 0.001 * ((k * 37) % 11 + 1);
        kc_elem_float(blk[k % 2], g, e, (unsigned long long)k, tol[t][0], tol[t][1]);
      }
      kc_acc_merge(blk[0], blk[1]);
      show(blk[0]);
    }
  }
  /* Integers: exact. */
  for (int t = 0; t < nt; t++)
    for (int g = -2; g <= 2; g++)
      for (int e = -2; e <= 2; e++) {
        kc_acc a;
        kc_acc_init(a);
        kc_elem_int(a, g != e, g, e, 0, tol[t][0], tol[t][1]);
        show(a);
      }
  return 0;
}
"""


def isnan(x):
    return x != x


def ref_float(g, e, atol, rtol):
    """_compare_torch's formulas for one element (float64), as a tuple in
    the kernel's order (bad, nan, mabs, mrel, err2, exp2, score)."""
    gn, en = isnan(g), isnan(e)
    gi, ei = (not gn) and abs(g) == INF, (not en) and abs(e) == INF
    both_nan = gn and en
    special = (gn or en or (gi != ei)) and not both_nan
    inf_bad = gi and ei and g != e
    fin = not (gn or en or gi or ei)
    d = abs(g - e) if fin else NAN
    lim = atol + rtol * abs(e) if not en else NAN
    fin_bad = fin and d > lim
    bad = int(special or inf_bad or fin_bad)
    nan = int(gn and not en)
    if fin:
        fscore = d / lim if lim > 0 else (INF if d > 0 else 0.0)
        score = fscore
    else:
        score = INF if (special or inf_bad) else 0.0
    if both_nan:
        score = -1.0
    dall = d if fin else (INF if (special or inf_bad) else 0.0)
    rel = d / abs(e) if fin and e != 0 else 0.0
    err2 = d * d if fin else 0.0
    exp2 = e * e if fin else 0.0
    return bad, nan, dall, rel, err2, exp2, score


def ref_merge(items):
    """torch's reductions over a sequence of ref_float tuples: sums, maxima,
    argmax (first maximum)."""
    bad = sum(i[0] for i in items)
    nan = sum(i[1] for i in items)
    mabs = max(i[2] for i in items)
    mrel = max(i[3] for i in items)
    err2 = math.fsum(i[4] for i in items)
    exp2 = math.fsum(i[5] for i in items)
    k = max(range(len(items)), key=lambda j: (items[j][6], -j))
    return bad, nan, mabs, mrel, err2, exp2, items[k][6], k


def same(a, b):
    if isnan(a) and isnan(b):
        return True
    if a == b:
        return True
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def main():
    fails = []
    # 1. NVRTC.
    try:
        image, what, lib = torchref_cuda.nvrtc_compile(torchref_cuda.KERNELS_CU, [90])
    except RuntimeError as e:
        if "cannot open" in str(e) or "No such file" in str(e):
            print("SKIP: no NVRTC here (%s)" % e)
            return 77
        fails.append("NVRTC: %s" % e)
    else:
        print("NVRTC: %s, %d bytes, from %s" % (what, len(image), lib))
        if not what.startswith("cubin sm_90"):
            fails.append("NVRTC made %s, not a cubin for sm_90" % what)

    # 2. The rules on the host.
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        print("SKIP: no C++ compiler for the host build")
        return 77 if not fails else 1
    tmp = tempfile.mkdtemp(prefix="kc_trk.")
    try:
        with open(os.path.join(tmp, "kernels.cu"), "w") as f:
            f.write("#define KC_HOST_TEST 1\n" + torchref_cuda.KERNELS_CU)
        with open(os.path.join(tmp, "h.cpp"), "w") as f:
            f.write(HARNESS)
        exe = os.path.join(tmp, "h")
        subprocess.run([cxx, "-std=c++17", "-O0", "-o", exe, os.path.join(tmp, "h.cpp")], check=True)
        nseq = 3 * len(VALUES) + 5
        text = "%d %d\n" % (len(TOLS), len(VALUES))
        text += "".join("%r %r\n" % t for t in TOLS)
        text += "".join("%016x\n" % struct.unpack("<Q", struct.pack("<d", v))[0] for v in VALUES)
        text += "%d\n" % nseq
        out = subprocess.run([exe], input=text, capture_output=True, text=True, check=True).stdout
        rows = [[float(x) for x in line.split()] for line in out.splitlines()]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    r = 0
    for atol, rtol in TOLS:
        for g, e in itertools.product(VALUES, VALUES):
            want = ref_float(g, e, atol, rtol)
            got = rows[r]
            r += 1
            names = ("bad", "nan", "max_abs", "max_rel", "err2", "exp2", "score")
            for name, w, x in zip(names, want, got[:7]):
                if not same(w, x):
                    fails.append("g=%r e=%r atol=%r rtol=%r: %s %r, the PyTorch path gives %r"
                                 % (g, e, atol, rtol, name, x, w))
            if got[7] != 0 or not (same(got[8], e) and same(got[9], g)):
                fails.append("g=%r e=%r: the worst element is (%r, %r, %r)" % (g, e, got[7], got[8], got[9]))
    fin = [v for v in VALUES if math.isfinite(v)]
    sequences = (
        ("merged sequence", lambda k: (VALUES[k % len(VALUES)], VALUES[(k * 7 + 3) % len(VALUES)]),
         nseq),
        ("finite sequence", lambda k: (fin[k % len(fin)], fin[(k * 5 + 2) % len(fin)]), 7 * len(fin)),
        ("close errors", lambda k: (1.0 + k * 0.01 + 0.001 * ((k * 37) % 11 + 1), 1.0 + k * 0.01),
         200))
    names = ("bad", "nan", "max_abs", "max_rel", "err2", "exp2", "worst score", "worst index")
    for label, pair, count in sequences:
        for atol, rtol in TOLS:
            want = ref_merge([ref_float(*pair(k), atol, rtol) for k in range(count)])
            got = rows[r]
            r += 1
            for name, w, x in zip(names, want, got[:8]):
                if not same(w, x):
                    fails.append("%s atol=%r rtol=%r: %s %r, the PyTorch path gives %r"
                                 % (label, atol, rtol, name, x, w))
    for atol, rtol in TOLS:
        for g in range(-2, 3):
            for e in range(-2, 3):
                d = abs(g - e)
                lim = atol + rtol * abs(e)
                score = d / lim if lim > 0 else (INF if d > 0 else 0.0)
                want = (int(g != e), 0, d, d / abs(e) if e else 0.0, d * d, e * e, score)
                got = rows[r]
                r += 1
                for w, x in zip(want, got[:7]):
                    if not same(w, x):
                        fails.append("int g=%d e=%d atol=%r rtol=%r: %r, want %r" % (g, e, atol, rtol, got, want))
                        break
    if r != len(rows):
        fails.append("the harness printed %d rows, %d read" % (len(rows), r))
    for f in fails[:20]:
        print("FAIL: " + f)
    print("%d cases, %d failures" % (r, len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
