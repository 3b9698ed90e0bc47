#!/usr/bin/env python3
"""torchref: the live PyTorch reference process of a `torch` task.

    python3 torchref.py --fd N

Speaks the JSON-lines protocol of docs/torchref.md over the socket (or any
bidirectional stream) on file descriptor N: one request per line, exactly
one reply per request. Ops: hello, load, inputs, check, baseline, unload.

The expected outputs, computed before the candidate runs, live in this
process's CUDA context and are never exported. The buffers the candidate
sees (inputs, parameters, outputs) are allocated here in one arena, a CUDA
allocation of its own, exported by one CUDA IPC handle; the model computes
with the shared parameters (checksummed, rebuilt when written) and draws
its inputs straight into the shared input buffers, so each tensor exists
once (docs/torchref.md "One copy of each tensor").

The request handlers are plain functions of a State (`handle(state, req)`
returns the reply as a dict), so tools/kernelbench/kb-ref-check.py runs them
in-process, without sockets. PyTorch is imported lazily (hello, load): a
machine without it answers NO_TORCH.

Logs go to stderr (one line per request, full tracebacks on errors);
anything the problem's code prints to stdout goes to stderr too.
"""
import argparse
import ctypes
import errno
import gc
import importlib.util
import json
import math
import os
import queue
import select
import shutil
import signal
import socket
import statistics
import struct
import sys
import tempfile
import threading
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

torch = None  # the module, once imported (_import_torch)
KERN = None   # the device kernels (Kernels), once compiled at hello; None: PyTorch ops


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


def _import_torch():
    global torch
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
    torch = t
    return t


# ------------------------------------------------------------- CUDA IPC

class Driver:
    """cuMemGetAddressRange and cuIpcGetMemHandle through libcuda: the
    handle of the whole cudaMalloc allocation a pointer is in, the pointer's
    offset in it and the allocation's size (so the caller can check that a
    shared buffer is alone in its allocation)."""

    def __init__(self, ordinal):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.ordinal = ordinal
        self.range = self.lib.cuMemGetAddressRange_v2
        self.range.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                               ctypes.c_uint64]
        self.range.restype = ctypes.c_int
        self.ipc = self.lib.cuIpcGetMemHandle
        self.ipc.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        self.ipc.restype = ctypes.c_int
        self.malloc = self.lib.cuMemAlloc_v2
        self.malloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.malloc.restype = ctypes.c_int
        self.mfree = self.lib.cuMemFree_v2
        self.mfree.argtypes = [ctypes.c_uint64]
        self.mfree.restype = ctypes.c_int

    def errname(self, rc):
        p = ctypes.c_char_p()
        try:
            self.lib.cuGetErrorName(ctypes.c_int(rc), ctypes.byref(p))
            return "%s (%d)" % (p.value.decode() if p.value else "?", rc)
        except Exception:
            return "CUresult %d" % rc

    def _make_current(self):
        """Makes the device's primary context (the one PyTorch's runtime
        uses) current on this thread."""
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        rc = self.lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(self.ordinal))
        if rc == 0:
            rc = self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
        if rc == 0:
            rc = self.lib.cuCtxSetCurrent(ctx)
        return rc

    def alloc(self, size):
        """cuMemAlloc in PyTorch's (primary) context: an allocation of its
        own, outside the caching allocator."""
        p = ctypes.c_uint64()
        rc = self.malloc(ctypes.byref(p), ctypes.c_size_t(size))
        if rc == 201:  # CUDA_ERROR_INVALID_CONTEXT
            rc2 = self._make_current()
            if rc2 != 0:
                raise RefError("INTERNAL", "cannot make the primary CUDA context current: %s" % self.errname(rc2))
            rc = self.malloc(ctypes.byref(p), ctypes.c_size_t(size))
        if rc == 2:  # CUDA_ERROR_OUT_OF_MEMORY
            raise RefError("INTERNAL", "out of GPU memory allocating the %d-byte shared arena" % size)
        if rc != 0:
            raise RefError("INTERNAL", "cuMemAlloc(%d) failed: %s" % (size, self.errname(rc)))
        return p.value

    def free(self, ptr):
        rc = self.mfree(ctypes.c_uint64(ptr))
        if rc != 0:
            log("cuMemFree(0x%x) failed: %s" % (ptr, self.errname(rc)))

    def share(self, ptr):
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        rc = self.range(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
        if rc == 201:  # CUDA_ERROR_INVALID_CONTEXT
            rc2 = self._make_current()
            if rc2 != 0:
                raise RefError("INTERNAL", "cannot make the primary CUDA context current: %s" % self.errname(rc2))
            rc = self.range(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
        if rc != 0:
            raise RefError("INTERNAL", "cuMemGetAddressRange(0x%x) failed: %s" % (ptr, self.errname(rc)))
        h = ctypes.create_string_buffer(64)
        rc = self.ipc(ctypes.cast(h, ctypes.c_void_p), ctypes.c_uint64(base.value))
        if rc != 0:
            raise RefError("INTERNAL", "cuIpcGetMemHandle failed: %s (is PYTORCH_CUDA_ALLOC_CONF "
                           "expandable_segments set?)" % self.errname(rc))
        return h.raw, ptr - base.value, size.value


def torch_share(t):
    """The IPC handle through PyTorch's own _share_cuda_ (the fallback where
    libcuda cannot be called): (64-byte handle, offset, None). PyTorch 2.x
    prefixes the handle with a version byte and a type byte ('c' for a
    cudaMalloc block). Note: PyTorch then keeps the block alive after it is
    freed (it waits for a consumer that never reports), so memory leaks at
    every unload on this path."""
    st = t.untyped_storage()
    r = st._share_cuda_()
    handle, offset = r[1], int(r[3])
    if len(handle) == 66 and handle[1:2] == b"c":
        handle = handle[2:]
    elif len(handle) != 64:
        raise RefError("INTERNAL", "PyTorch's CUDA IPC handle has %d bytes (type %r); only cudaMalloc "
                       "handles (64 bytes) can be exported: unset expandable_segments in "
                       "PYTORCH_CUDA_ALLOC_CONF" % (len(handle), handle[1:2]))
    return handle, offset + t.storage_offset() * t.element_size(), None


class DeviceBuffer:
    """A cuMemAlloc allocation seen by PyTorch through the CUDA array
    interface (torch.as_tensor keeps this object alive while any tensor
    uses the memory); freed when the last reference goes."""

    def __init__(self, driver, size):
        self.driver = driver
        self.size = size
        self.ptr = driver.alloc(size)
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (self.ptr, False),
                                         "version": 3, "strides": None}

    def __del__(self):
        if self.ptr:
            try:
                torch.cuda.synchronize()
            except Exception:
                pass
            self.driver.free(self.ptr)
            self.ptr = 0


# ------------------------------------------------- the device kernels

# The comparison, the norms and the checksums as one kernel each (plus a
# one-block finish), compiled with NVRTC at hello and launched on
# PyTorch's stream: one pass over the data, no temporaries, no Python loop
# over chunks. Element arithmetic in double registers, as the sandbox's own
# comparison (verify.c, helpers_cu.c kc_compare); per-thread sums in double
# merged in a fixed tree, so a result does not depend on scheduling. Where
# NVRTC cannot be loaded the same figures come from PyTorch operations in
# chunks (the *_torch functions below).
KERNELS_CU = r"""
typedef unsigned long long u64;
typedef long long i64;
#define KC_BT 256
#define KC_NB 1024
#define KC_NPART 10
#define KC_INF __longlong_as_double(0x7ff0000000000000ll)

struct kc_h16 { unsigned short x; };
struct kc_b16 { unsigned short x; };

__device__ __forceinline__ double kc_ld(const float *p, u64 i) { return p[i]; }
__device__ __forceinline__ double kc_ld(const double *p, u64 i) { return p[i]; }
#ifndef KC_HOST_TEST
__device__ __forceinline__ double kc_ld(const kc_h16 *p, u64 i) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i].x));
  return f;
}
#endif
__device__ __forceinline__ double kc_ld(const kc_b16 *p, u64 i) {
  return __uint_as_float(((unsigned)p[i].x) << 16);
}
__device__ __forceinline__ double kc_ld(const int *p, u64 i) { return p[i]; }
__device__ __forceinline__ double kc_ld(const i64 *p, u64 i) { return (double)p[i]; }
__device__ __forceinline__ double kc_ld(const signed char *p, u64 i) { return p[i]; }
__device__ __forceinline__ double kc_ld(const unsigned char *p, u64 i) { return p[i]; }
__device__ __forceinline__ bool kc_neq(const int *g, const int *e, u64 i) { return g[i] != e[i]; }
__device__ __forceinline__ bool kc_neq(const i64 *g, const i64 *e, u64 i) { return g[i] != e[i]; }
__device__ __forceinline__ bool kc_neq(const signed char *g, const signed char *e, u64 i) { return g[i] != e[i]; }
__device__ __forceinline__ bool kc_neq(const unsigned char *g, const unsigned char *e, u64 i) { return g[i] != e[i]; }
__device__ __forceinline__ double kc_abs(double x) { return x < 0 ? -x : x; }
__device__ __forceinline__ double kc_max(double a, double b) { return b > a ? b : a; }

/* One thread's (then one block's) figures, in the order of a partial. */
struct kc_acc {
  double bad, nan, mabs, mrel, err2, exp2, ws, wi, we, wg;
};

__device__ __forceinline__ void kc_acc_init(kc_acc &a) {
  a.bad = a.nan = a.mabs = a.mrel = a.err2 = a.exp2 = 0;
  a.ws = -KC_INF;
  a.wi = a.we = a.wg = 0;
}

/* b into a; the worst element is the larger score, the lower index on a tie
 * (torch.argmax's first maximum). */
__device__ __forceinline__ void kc_acc_merge(kc_acc &a, const kc_acc &b) {
  a.bad += b.bad; a.nan += b.nan;
  a.mabs = kc_max(a.mabs, b.mabs); a.mrel = kc_max(a.mrel, b.mrel);
  a.err2 += b.err2; a.exp2 += b.exp2;
  if (b.ws > a.ws || (b.ws == a.ws && b.wi < a.wi)) {
    a.ws = b.ws; a.wi = b.wi; a.we = b.we; a.wg = b.wg;
  }
}

/* The sandbox's rules for a floating element (verify.c, docs/torchref.md). */
__device__ __forceinline__ void kc_elem_float(kc_acc &a, double g, double e, u64 i, double atol,
                                              double rtol) {
  bool gn = g != g, en = e != e;
  bool gi = !gn && kc_abs(g) == KC_INF, ei = !en && kc_abs(e) == KC_INF;
  bool both_nan = gn && en;
  bool special = (gn || en || gi != ei) && !both_nan;
  bool inf_bad = gi && ei && g != e;
  bool fin = !(gn || en || gi || ei);
  double d = kc_abs(g - e), lim = atol + rtol * kc_abs(e), score, dall, rel = 0;
  a.bad += (special || inf_bad || (fin && d > lim)) ? 1 : 0;
  a.nan += (gn && !en) ? 1 : 0;
  if (fin) {
    score = lim > 0 ? d / lim : (d > 0 ? KC_INF : 0);
    dall = d;
    if (e != 0) rel = d / kc_abs(e);
    a.err2 += d * d;
    a.exp2 += e * e;
  } else {
    score = dall = (special || inf_bad) ? KC_INF : 0;
  }
  if (both_nan) score = -1;
  a.mabs = kc_max(a.mabs, dall);
  a.mrel = kc_max(a.mrel, rel);
  if (score > a.ws) { a.ws = score; a.wi = (double)i; a.we = e; a.wg = g; }
}

/* An integer or bool element: exact, bad when different. */
__device__ __forceinline__ void kc_elem_int(kc_acc &a, bool neq, double g, double e, u64 i,
                                            double atol, double rtol) {
  double d = kc_abs(g - e), lim = atol + rtol * kc_abs(e);
  double score = lim > 0 ? d / lim : (d > 0 ? KC_INF : 0);
  a.bad += neq ? 1 : 0;
  a.mabs = kc_max(a.mabs, d);
  if (e != 0) a.mrel = kc_max(a.mrel, d / kc_abs(e));
  a.err2 += d * d;
  a.exp2 += e * e;
  if (score > a.ws) { a.ws = score; a.wi = (double)i; a.we = e; a.wg = g; }
}

#ifndef KC_HOST_TEST
__device__ void kc_acc_store(double *p, const kc_acc &a) {
  p[0] = a.bad; p[1] = a.nan; p[2] = a.mabs; p[3] = a.mrel; p[4] = a.err2;
  p[5] = a.exp2; p[6] = a.ws; p[7] = a.wi; p[8] = a.we; p[9] = a.wg;
}
__device__ void kc_acc_load(kc_acc &a, const double *p) {
  a.bad = p[0]; a.nan = p[1]; a.mabs = p[2]; a.mrel = p[3]; a.err2 = p[4];
  a.exp2 = p[5]; a.ws = p[6]; a.wi = p[7]; a.we = p[8]; a.wg = p[9];
}

/* A block's accumulators merged in a fixed tree (deterministic), through
 * shared memory; thread 0 ends with the block's figures. */
__device__ void kc_block_merge(kc_acc &a) {
  __shared__ double sh[KC_BT * KC_NPART];
  unsigned t = threadIdx.x;
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (t >= s && t < 2 * s) kc_acc_store(sh + (t - s) * KC_NPART, a);
    __syncthreads();
    if (t < s) {
      kc_acc b;
      kc_acc_load(b, sh + t * KC_NPART);
      kc_acc_merge(a, b);
    }
    __syncthreads();
  }
}

#define KC_CMP_FLOAT(NAME, T)                                                        \
  extern "C" __global__ void NAME(const T *g, const T *e, u64 n, double atol,        \
                                  double rtol, double *part) {                       \
    kc_acc a;                                                                        \
    kc_acc_init(a);                                                                  \
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;                  \
         i += (u64)gridDim.x * blockDim.x)                                           \
      kc_elem_float(a, kc_ld(g, i), kc_ld(e, i), i, atol, rtol);                     \
    kc_block_merge(a);                                                               \
    if (threadIdx.x == 0) kc_acc_store(part + blockIdx.x * KC_NPART, a);             \
  }
#define KC_CMP_INT(NAME, T)                                                          \
  extern "C" __global__ void NAME(const T *g, const T *e, u64 n, double atol,        \
                                  double rtol, double *part) {                       \
    kc_acc a;                                                                        \
    kc_acc_init(a);                                                                  \
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;                  \
         i += (u64)gridDim.x * blockDim.x)                                           \
      kc_elem_int(a, kc_neq(g, e, i), kc_ld(g, i), kc_ld(e, i), i, atol, rtol);      \
    kc_block_merge(a);                                                               \
    if (threadIdx.x == 0) kc_acc_store(part + blockIdx.x * KC_NPART, a);             \
  }
KC_CMP_FLOAT(kc_cmp_f32, float)
KC_CMP_FLOAT(kc_cmp_f64, double)
KC_CMP_FLOAT(kc_cmp_f16, kc_h16)
KC_CMP_FLOAT(kc_cmp_bf16, kc_b16)
KC_CMP_INT(kc_cmp_i32, int)
KC_CMP_INT(kc_cmp_i64, i64)
KC_CMP_INT(kc_cmp_i8, signed char)
KC_CMP_INT(kc_cmp_u8, unsigned char)

/* The blocks' partials into one (a single block of KC_BT threads, in the
 * same fixed tree). */
extern "C" __global__ void kc_cmp_finish(const double *part, unsigned nb, double *out) {
  kc_acc a, b;
  kc_acc_init(a);
  for (unsigned j = threadIdx.x; j < nb; j += blockDim.x) {
    kc_acc_load(b, part + j * KC_NPART);
    kc_acc_merge(a, b);
  }
  kc_block_merge(a);
  if (threadIdx.x == 0) kc_acc_store(out, a);
}

/* Sums of a, a*a and (a-b)^2 (b may be null) per block, in double; NaN and
 * infinities propagate. */
__device__ void kc_sum3_block(double *s) {
  __shared__ double sh[KC_BT * 3];
  unsigned t = threadIdx.x;
  for (unsigned k = 0; k < 3; k++) sh[t * 3 + k] = s[k];
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (t < w)
      for (unsigned k = 0; k < 3; k++) sh[t * 3 + k] += sh[(t + w) * 3 + k];
    __syncthreads();
  }
  for (unsigned k = 0; k < 3; k++) s[k] = sh[k];
}
#define KC_SUMS(NAME, T)                                                             \
  extern "C" __global__ void NAME(const T *a, const T *b, u64 n, double *part) {     \
    double s[3] = {0, 0, 0};                                                         \
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;                  \
         i += (u64)gridDim.x * blockDim.x) {                                         \
      double x = kc_ld(a, i);                                                        \
      s[0] += x;                                                                     \
      s[1] += x * x;                                                                 \
      if (b) { double d = x - kc_ld(b, i); s[2] += d * d; }                          \
    }                                                                                \
    kc_sum3_block(s);                                                                \
    if (threadIdx.x == 0)                                                            \
      for (int k = 0; k < 3; k++) part[blockIdx.x * 3 + k] = s[k];                   \
  }
KC_SUMS(kc_sums_f32, float)
KC_SUMS(kc_sums_f64, double)
KC_SUMS(kc_sums_f16, kc_h16)
KC_SUMS(kc_sums_bf16, kc_b16)
extern "C" __global__ void kc_sums_finish(const double *part, unsigned nb, double *out) {
  double s[3] = {0, 0, 0};
  for (unsigned j = threadIdx.x; j < nb; j += blockDim.x)
    for (int k = 0; k < 3; k++) s[k] += part[j * 3 + k];
  kc_sum3_block(s);
  if (threadIdx.x == 0)
    for (int k = 0; k < 3; k++) out[k] = s[k];
}

/* The checksum of a span of 64-bit words: the wrapping sums of w[i] and of
 * w[i] * (i + 1) (order-free, so atomics keep it deterministic); out is
 * zeroed by the caller. */
extern "C" __global__ void kc_checksum(const u64 *w, u64 n, u64 *out) {
  u64 s1 = 0, s2 = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x) {
    u64 v = w[i];
    s1 += v;
    s2 += v * (i + 1);
  }
  for (int o = 16; o > 0; o /= 2) {
    s1 += __shfl_down_sync(~0u, s1, o);
    s2 += __shfl_down_sync(~0u, s2, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(out, s1);
    atomicAdd(out + 1, s2);
  }
}
#endif
"""
KC_BT = 256        # threads per block of every kernel (a power of two)
KC_NB = 1024       # blocks at most (the finish merges up to this many)
KC_NPART = 10      # doubles per compare partial
KC_CMP = {"f32": "f32", "f64": "f64", "f16": "f16", "bf16": "bf16", "i32": "i32", "i64": "i64",
          "i8": "i8", "u8": "u8", "bool": "u8"}
KC_SUMS = ("f32", "f64", "f16", "bf16")


def nvrtc_candidates(cuda_version=None):
    """Where libnvrtc may be: the CUDA toolkit's (what the sandbox child
    compiles with, so its code loads on this driver), the loader's, then the
    copies pip installs beside PyTorch."""
    names = []
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            names.append(os.path.join(home, "lib64", "libnvrtc.so"))
    names.append("libnvrtc.so")
    major = (cuda_version or "").split(".")[0]
    for v in ([major] if major else []) + ["13", "12", "11.2"]:
        names.append("libnvrtc.so.%s" % v)
    for d in sys.path:
        for sub in ("nvidia/cuda_nvrtc/lib", "nvidia/cu13/lib", "nvidia/cu12/lib", "torch/lib"):
            lib = os.path.join(d, sub)
            if os.path.isdir(lib):
                for f in sorted(os.listdir(lib)):
                    if f.startswith("libnvrtc.so"):
                        names.append(os.path.join(lib, f))
    seen, out = set(), []
    for n in names:
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out


def nvrtc_compile(source, archs, cuda_version=None):
    """source -> (image bytes, 'cubin sm_XX' or 'ptx compute_XX', library):
    a CUBIN for the first arch NVRTC accepts, else PTX (the driver compiles
    it). Raises RuntimeError with NVRTC's log when nothing compiles."""
    for image in nvrtc_images(source, archs, cuda_version):
        return image
    raise RuntimeError("unreachable")


def nvrtc_images(source, archs, cuda_version=None, errors=None):
    """Every image NVRTC makes of source, best first: for each library
    (nvrtc_candidates) a CUBIN of the first arch it accepts, else PTX. The
    caller takes the first that its driver loads. Raises RuntimeError with
    NVRTC's logs when none compiles."""
    errors = [] if errors is None else errors
    made = 0
    for name in nvrtc_candidates(cuda_version):
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            errors.append("%s: %s" % (name, e))
            continue
        for arch in archs:
            for kind in ("sm", "compute"):
                prog = ctypes.c_void_p()
                rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kclaw_torchref.cu",
                                            0, None, None)
                if rc != 0:
                    errors.append("%s: nvrtcCreateProgram %d" % (name, rc))
                    break
                opts = [("--gpu-architecture=%s_%d" % (kind, arch)).encode(), b"-default-device"]
                arr = (ctypes.c_char_p * len(opts))(*opts)
                rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
                image = None
                if rc == 0:
                    n = ctypes.c_size_t()
                    get_size, get = (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if kind == "sm" else \
                        (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX)
                    if get_size(prog, ctypes.byref(n)) == 0 and n.value > 0:
                        buf = ctypes.create_string_buffer(n.value)
                        if get(prog, buf) == 0:
                            image = buf.raw
                else:
                    n = ctypes.c_size_t()
                    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
                    buf = ctypes.create_string_buffer(max(n.value, 1))
                    lib.nvrtcGetProgramLog(prog, buf)
                    errors.append("%s %s_%d: %s" % (name, kind, arch, one_line(buf.value.decode(errors="replace"))))
                lib.nvrtcDestroyProgram(ctypes.byref(prog))
                if image is not None:
                    made += 1
                    yield image, "%s %s_%d" % ("cubin" if kind == "sm" else "ptx", kind, arch), name
                    break
            else:
                continue
            break
    if made == 0:
        raise RuntimeError("NVRTC compiled nothing: " + "; ".join(errors[-4:]))


class Kernels:
    """The device kernels in PyTorch's context (Driver's libcuda), launched
    on the current stream; each call ends with one copy of a few numbers to
    the host (the only synchronisation)."""

    def __init__(self, driver, dev, cuda_version):
        self.driver = driver
        self.dev = dev
        lib = driver.lib
        major, minor = torch.cuda.get_device_capability(dev)
        cc = 10 * major + minor
        archs = [cc] + [a for a in (90, 80, 75) if a < cc]
        mod = ctypes.c_void_p()
        failed = []
        # A newer NVRTC's image may not load on an older driver: the next
        # library's then.
        for image, what, name in nvrtc_images(KERNELS_CU, archs, cuda_version):
            rc = lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(image))
            if rc == 201:  # CUDA_ERROR_INVALID_CONTEXT
                driver._make_current()
                rc = lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(image))
            if rc == 0:
                self.what, self.nvrtc = what, name
                break
            failed.append("%s from %s: %s" % (what, name, driver.errname(rc)))
        else:
            raise RuntimeError("cuModuleLoadData failed for every image: %s" % "; ".join(failed))
        self.mod = mod
        self.launch_fn = lib.cuLaunchKernel
        self.launch_fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + \
            [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        self.launch_fn.restype = ctypes.c_int
        self.fn = {}
        names = ["kc_cmp_" + k for k in sorted(set(KC_CMP.values()))] + \
            ["kc_sums_" + k for k in KC_SUMS] + ["kc_cmp_finish", "kc_sums_finish", "kc_checksum"]
        for name in names:
            f = ctypes.c_void_p()
            rc = lib.cuModuleGetFunction(ctypes.byref(f), mod, name.encode())
            if rc != 0:
                raise RuntimeError("cuModuleGetFunction(%s) failed: %s" % (name, driver.errname(rc)))
            self.fn[name] = f
        self.part = torch.empty(KC_NB * KC_NPART, dtype=torch.float64, device=dev)
        self.out = torch.empty(KC_NPART, dtype=torch.float64, device=dev)
        self.ck = torch.zeros(2, dtype=torch.int64, device=dev)

    def _launch(self, name, blocks, args):
        """args: ctypes values (kept alive here until the launch returns)."""
        ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        stream = torch.cuda.current_stream(self.dev).cuda_stream
        rc = self.launch_fn(self.fn[name], blocks, 1, 1, KC_BT, 1, 1, 0, ctypes.c_void_p(stream), ptrs, None)
        if rc != 0:
            raise RuntimeError("cuLaunchKernel(%s) failed: %s" % (name, self.driver.errname(rc)))

    @staticmethod
    def blocks(n):
        return max(1, min(KC_NB, (n + KC_BT - 1) // KC_BT))

    def compare(self, got, exp, dtype, atol, rtol):
        """check's figures for one output (docs/torchref.md)."""
        n = got.numel()
        if n == 0:
            return {"count": 0, "bad": 0, "nan": 0, "worst": 0, "expected": 0.0, "got": 0.0,
                    "max_abs": 0.0, "max_rel": 0.0, "err_norm": 0.0, "exp_norm": 0.0}
        nb = self.blocks(n)
        u64, dbl = ctypes.c_uint64, ctypes.c_double
        self._launch("kc_cmp_" + KC_CMP[dtype], nb,
                     [u64(got.data_ptr()), u64(exp.data_ptr()), u64(n), dbl(atol), dbl(rtol),
                      u64(self.part.data_ptr())])
        self._launch("kc_cmp_finish", 1, [u64(self.part.data_ptr()), ctypes.c_uint(nb),
                                          u64(self.out.data_ptr())])
        v = self.out.tolist()
        return {"count": n, "bad": int(v[0]), "nan": int(v[1]), "worst": int(v[7]),
                "expected": v[8], "got": v[9], "max_abs": v[2], "max_rel": v[3],
                "err_norm": math.sqrt(v[4]) if v[4] >= 0 else v[4],
                "exp_norm": math.sqrt(v[5]) if v[5] >= 0 else v[5]}

    def sums(self, a, b=None, dtype="f32"):
        """(sum a, sum a^2, sum (a-b)^2) in double over a floating tensor."""
        n = a.numel()
        if n == 0:
            return 0.0, 0.0, 0.0
        nb = self.blocks(n)
        u64 = ctypes.c_uint64
        self._launch("kc_sums_" + dtype, nb, [u64(a.data_ptr()), u64(b.data_ptr() if b is not None else 0),
                                             u64(n), u64(self.part.data_ptr())])
        self._launch("kc_sums_finish", 1, [u64(self.part.data_ptr()), ctypes.c_uint(nb),
                                           u64(self.out.data_ptr())])
        v = self.out[:3].tolist()
        return v[0], v[1], v[2]

    def checksum(self, words):
        """The two wrapping sums of an int64 tensor (contiguous)."""
        n = words.numel()
        if n == 0:
            return (0, 0)
        self.ck.zero_()
        u64 = ctypes.c_uint64
        self._launch("kc_checksum", self.blocks(n), [u64(words.data_ptr()), u64(n), u64(self.ck.data_ptr())])
        return tuple(int(x) for x in self.ck.tolist())


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
        self.input_sums = None   # checksums of the shared inputs (kept with keep)


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
    t = _import_torch()
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
    global KERN
    KERN = None
    if st.driver is not None and os.environ.get("KCLAW_TORCHREF_KERNELS") != "torch":
        try:
            KERN = Kernels(st.driver, st.dev, t.version.cuda)
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


def unload(st):
    """Frees the task: buffers, model, compiled modules, the module and its
    file; returns the GPU memory to the driver."""
    t = st.task
    _free_serials(st)
    st.task = None
    if t is None:
        return
    t0 = time.monotonic()
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
    if torch is not None:
        if had_compiled:
            try:
                torch._dynamo.reset()
            except Exception as e:
                log("torch._dynamo.reset() failed: %s" % describe_exc(e))
        gc.collect()
        # The arena's memory goes back once nothing can use it any more.
        t.arena_holder = None
        gc.collect()
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception as e:
            log("freeing GPU memory failed: %s" % describe_exc(e))
    log("unload %s: %.3f s" % (t.key[:16], time.monotonic() - t0))


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
    # Shared buffers first, while the cache is empty: the arena is a fresh
    # cudaMalloc segment of its own. The peak memory counts from here.
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    _alloc_shared(st, t)

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

    # The weights live in the arena from now on (once).
    _point_model_at_arena(t)
    t.param_sum = _param_sum(t)

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
    t.reply = {
        "buffers": [{"name": b.name, "handle": b.handle, "offset": b.offset, "bytes": b.nbytes}
                    for b in t.bufs if b.kind != "scalar"],
        "scalars": dict(t.scalars),
        "flops": flops,
    }
    log("load %s: %d tensors, %.1f MB shared in one %.1f MB arena, %s FLOPs, %.2f s"
        % (t.key[:16], len(t.bufs), sum(b.nbytes for b in t.bufs) / 1e6, t.arena.numel() / 1e6,
           "%.3g" % flops if flops is not None else "no", time.monotonic() - t0))
    return dict(t.reply, gpu_ms=clock.ms())


def _need_task(st, op):
    if st.task is None or st.task.reply is None:
        raise RefError("INTERNAL", "%s before load: no task is loaded" % op)
    return st.task


def op_inputs(st, req):
    t = _need_task(st, "inputs")
    serial = _need(req, "serial", int)
    seed = _need(req, "seed", int)
    variant = _need(req, "variant", int)
    keep = bool(req.get("keep", False))
    if not 0 <= variant < NVARIANTS:
        raise RefError("INTERNAL", "inputs: unknown variant %d (0 to %d)" % (variant, NVARIANTS - 1))
    # The previous serial's expected outputs go first (kept serial 0's
    # stay for var_norm).
    st.cur = None
    _restore_params(st, t)
    clock = GpuClock()
    clock.start()
    drawn = _draw(st, seed, variant, into_arena=True)
    tens, rest = _split_inputs(t, drawn, "inputs")
    for b, v in zip(t.by_kind("scalar"), rest):
        if _scalar_value(b, v) != t.scalars.get(b.name):
            raise RefError("BAD_TASK", "scalar '%s' is %r for seed %d but was %r at load: a scalar must "
                           "not depend on the seed" % (b.name, v, seed, t.scalars.get(b.name)))
    ibufs = t.by_kind("input")
    for b, v in zip(ibufs, tens):
        _check_tensor(b, v, "tensor")
    # The expected outputs are computed now, before the candidate runs, on
    # the very inputs it will get: nothing the candidate writes later can
    # change them.
    shared = _to_shared(t, drawn)
    args = drawn if t.writes_inputs else shared
    del shared
    if not t.writes_inputs:
        del drawn, tens
    clock.stop()
    clock.start()
    outs = _forward(st, args, "inputs, seed %d" % seed)
    obufs = t.by_kind("output")
    if len(outs) != len(obufs):
        raise RefError("BAD_TASK", "forward returned %d tensors for seed %d but the task declares %d "
                       "outputs" % (len(outs), seed, len(obufs)))
    for b, o in zip(obufs, outs):
        _check_tensor(b, o, "tensor")
    exp = [o.reshape(b.shape) for b, o in zip(obufs, _own_outputs(st, outs, args))]
    clock.stop()
    del outs, args
    if t.writes_inputs:
        del drawn, tens
    cur = Serial(serial, seed, variant, keep)
    cur.expected = exp
    if keep:
        cur.input_sums = [_buf_sum(t, b) for b in ibufs]
    del rest
    res = []
    for b, e in zip(obufs, exp):
        var = None
        if keep and st.prev_kept is not None:
            var = _diffnorm64(e, st.prev_kept[len(res)], b.dtype)
        # The norms are read for kept serials only (the variation rule):
        # a timed run's inputs skip that pass over its outputs.
        res.append({"name": b.name, "exp_norm": _norm64(e, b.dtype) if keep else None, "var_norm": var})
    # Only kept serial 0's outputs are held, until the next serial (the
    # variation between trials 0 and 1): one more output copy at most.
    st.prev_kept = exp if keep and serial == 0 else None
    for b in obufs:
        b.raw.fill_(255)
    torch.cuda.synchronize()
    st.cur = cur
    return {"outputs": res, "gpu_ms": clock.ms()}


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
    written = []
    if st.cur.keep and st.cur.input_sums is not None:
        for b, h in zip(t.by_kind("input"), st.cur.input_sums):
            if _buf_sum(t, b) != h:
                written.append(b.name)
        if t.param_sum is not None and _param_sum(t) != t.param_sum:
            written.append("parameters")
    if hold:
        st.held = None
        st.held = [b.view.clone() for b in obufs]
    torch.cuda.synchronize()
    return {"outputs": res, "written": written, "gpu_ms": clock.ms()}


def _stats(times, setup_s):
    return {"median_ms": statistics.median(times), "mean_ms": statistics.fmean(times),
            "min_ms": min(times), "max_ms": max(times),
            "stddev_ms": statistics.stdev(times) if len(times) > 1 else 0.0,
            "iterations": len(times), "setup_s": setup_s}


def _median_settled(times, ci):
    """The distribution-free 95 % interval of the median (order statistics
    n/2 -+ 1.96 sqrt(n)/2) within ci of it on either side."""
    n = len(times)
    if n < 2:
        return False
    x = sorted(times)
    half = 0.98 * math.sqrt(n)
    lo = max(0, int(math.floor(n / 2.0 - half)))
    hi = min(n - 1, int(math.ceil(n / 2.0 + half)))
    return (x[hi] - x[lo]) / 2 <= ci * statistics.median(x)


def _baseline_args(t, drawn):
    """A timed run's arguments: the drawn values in the shared input
    buffers (the draw is freed), so a baseline needs no second copy of the
    inputs; private ones for a model that writes its inputs."""
    return drawn if t.writes_inputs else _to_shared(t, drawn)


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
                args = _baseline_args(t, _draw(st, seed, 0, into_arena=True))
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
                args = _baseline_args(t, _draw(st, seed + i, 0, into_arena=True))
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


OPS = {"hello": op_hello, "load": op_load, "inputs": op_inputs, "check": op_check,
       "baseline": op_baseline, "unload": op_unload}


def handle(st, req):
    """One request (a dict) -> its reply (a dict, JSON-ready but for
    non-finite numbers: see sanitize). Never raises for an ordinary
    failure; sets st.fatal after an error that poisons the CUDA context."""
    t0 = time.monotonic()
    op = req.get("op") if isinstance(req, dict) else None
    try:
        if not isinstance(req, dict):
            raise RefError("INTERNAL", "a request must be a JSON object")
        fn = OPS.get(op)
        if fn is None:
            raise RefError("INTERNAL", "unknown op %r; the ops are %s" % (op, ", ".join(OPS)))
        reply = {"ok": True}
        reply.update(fn(st, req))
    except RefError as e:
        reply = {"ok": False, "code": e.code, "error": e.msg}
        if is_fatal_cuda(e.__cause__):
            st.fatal = True
    except Exception as e:
        log("%s failed:\n%s" % (op, traceback.format_exc()))
        if is_fatal_cuda(e):
            st.fatal = True
        what = "out of GPU memory" if is_oom(e) else "internal error"
        reply = {"ok": False, "code": "INTERNAL",
                 "error": "%s: %s %s" % (op, what, describe_exc(e))}
    if st.fatal:
        reply["error"] = reply.get("error", "") + " (the CUDA context is lost; the reference " \
                                                  "process exits after this reply)"
    log("%s%s -> %s %.3f s" % (op, "" if op not in ("inputs", "check") else " serial %s" % req.get("serial"),
                               "ok" if reply.get("ok") else "%s: %s" % (reply["code"], reply["error"]),
                               time.monotonic() - t0))
    return reply


def encode(reply):
    return (json.dumps(sanitize(reply), allow_nan=False, separators=(",", ":")) + "\n").encode()


# ----------------------------------------------------------- the process

def _write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def serve(fd, st=None):
    """Requests on fd until end of file: 0 at end of file, 1 when a reply
    cannot be written, 2 after an error that lost the CUDA context."""
    st = st if st is not None else State()
    rf = os.fdopen(os.dup(fd), "rb", buffering=1 << 16)
    try:
        while True:
            line = rf.readline(LINE_MAX + 1)
            if not line:
                log("end of file on fd %d" % fd)
                return 0
            if len(line) > LINE_MAX and not line.endswith(b"\n"):
                while True:
                    more = rf.readline(LINE_MAX + 1)
                    if not more or more.endswith(b"\n"):
                        break
                reply = {"ok": False, "code": "INTERNAL", "error": "request longer than 16 MiB"}
            else:
                try:
                    req = json.loads(line)
                except Exception as e:
                    req = None
                    reply = {"ok": False, "code": "INTERNAL",
                             "error": "request is not JSON (%s): %r" % (one_line(e, 120), line[:80])}
                if req is not None:
                    reply = handle(st, req)
            try:
                _write_all(fd, encode(reply))
            except OSError as e:
                log("cannot write the reply (%s)" % e)
                return 1
            if st.fatal:
                log("the CUDA context is lost: exiting so that a fresh process is started")
                return 2
    finally:
        rf.close()


# ------------------------------------------------------ the warm process

def _peer_uid(conn):
    cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", cred)[1]


def _bind(path):
    """A listening Unix socket at path, owner-only; None when another
    process already listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        try:
            sock.bind(path)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
                probe.close()
                sock.close()
                return None
            except OSError:
                probe.close()
            os.unlink(path)  # a stale socket: nobody listens
            sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(8)
    return sock


# A request still running this long after its sandbox hung up ends the
# warm process (KCLAW_TORCHREF_ORPHAN_S).
ORPHAN_S = 10

BUSY = {"ok": False, "code": "BUSY",
        "error": "the warm reference process serves another sandbox; start a private one"}


def listen(path, idle_s, serve_conn):
    """The warm reference process (docs/torchref.md "Warm process"): serves
    one connection at a time on the Unix socket at path (mode 0600; peers
    of another user are refused), answers BUSY to a second one while the
    first is served, and exits after idle_s seconds without a connection.
    serve_conn(fd) serves one connection and returns serve()'s code; 2
    (the CUDA context is lost) ends the process. Returns the exit code."""
    sock = _bind(path)
    if sock is None:
        log("another process listens on %s: exiting" % path)
        return 0
    log("listening on %s (idle exit after %d s)" % (path, idle_s))
    lock = threading.Lock()
    busy = [False]
    active = [None]   # the connection being served
    conns = queue.Queue()

    def watchdog():
        # A private process dies with its sandbox child (PR_SET_PDEATHSIG);
        # this one outlives it, so a request that still runs well after its
        # sandbox hung up (a hung forward, the child killed at its deadline)
        # ends the process instead of holding the GPU for good.
        since = None
        seen = None
        try:
            orphan_s = float(os.environ.get("KCLAW_TORCHREF_ORPHAN_S") or ORPHAN_S)
        except ValueError:
            orphan_s = ORPHAN_S
        while True:
            time.sleep(min(1.0, orphan_s / 4))
            with lock:
                c = active[0]
                hup = False
                if c is not None:
                    try:
                        p = select.poll()
                        p.register(c.fileno(), select.POLLRDHUP)
                        hup = any(ev & (select.POLLRDHUP | select.POLLHUP | select.POLLERR)
                                  for _, ev in p.poll(0))
                    except (OSError, ValueError):
                        hup = False
            if c is not seen or not hup:
                seen, since = c, (time.monotonic() if hup else None)
                continue
            if since is None:
                since = time.monotonic()
            if time.monotonic() - since > orphan_s:
                log("a request still runs %d s after its sandbox hung up: exiting" % orphan_s)
                try:
                    os.unlink(path)
                except OSError:
                    pass
                os._exit(1)

    def refuse(conn):
        # BUSY, then the request read before closing: a peer whose hello
        # meets a closed socket sees end of file, not the reason.
        try:
            conn.sendall(encode(BUSY))
            conn.settimeout(2)
            conn.recv(LINE_MAX)
        except OSError:
            pass
        conn.close()

    def acceptor():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            try:
                if _peer_uid(conn) != os.getuid():
                    log("refused a connection of another user")
                    conn.close()
                    continue
            except OSError:
                conn.close()
                continue
            with lock:
                was = busy[0]
                busy[0] = True
            if was:
                threading.Thread(target=refuse, args=(conn,), daemon=True).start()
                continue
            conns.put(conn)

    threading.Thread(target=acceptor, name="accept", daemon=True).start()
    threading.Thread(target=watchdog, name="watchdog", daemon=True).start()
    while True:
        try:
            conn = conns.get(timeout=idle_s)
        except queue.Empty:
            with lock:
                if busy[0]:
                    continue
                busy[0] = True  # no new session from here on
            try:
                os.unlink(path)
            except OSError:
                pass
            log("idle for %d s: exiting" % idle_s)
            return 0
        with lock:
            active[0] = conn
        rc = serve_conn(conn.fileno())
        with lock:
            active[0] = None
            busy[0] = False
        conn.close()
        if rc == 2:
            try:
                os.unlink(path)
            except OSError:
                pass
            return 1


def _serve_warm(st):
    def one(fd):
        log("a sandbox connected")
        rc = serve(fd, st)
        # The loaded task (model, arena, compiled modules) stays for the next
        # evaluation; what belonged to this one goes.
        _free_serials(st)
        return rc
    return one


def _pdeathsig():
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
            log("prctl(PR_SET_PDEATHSIG) failed: errno %d" % ctypes.get_errno())
    except Exception as e:
        log("prctl(PR_SET_PDEATHSIG) unavailable: %s" % e)
    if os.getppid() != parent or parent == 1:
        log("the parent is gone: exiting")
        sys.exit(1)


def main(argv=None):
    ap = argparse.ArgumentParser(description="The live PyTorch reference process (docs/torchref.md).")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--fd", type=int, help="the socket's file descriptor (a private process)")
    g.add_argument("--listen", metavar="PATH", help="a Unix socket to serve sandboxes on, one at a "
                   "time (the warm process)")
    ap.add_argument("--idle-s", type=int, default=600, help="with --listen: exit after this many "
                    "seconds without a connection (default 600)")
    a = ap.parse_args(argv)
    fd = a.fd
    if a.listen is None:
        _pdeathsig()
        try:
            os.fstat(fd)
        except OSError as e:
            sys.exit("torchref: --fd %d is not open (%s)" % (fd, e))
        if fd <= 2:
            nfd = os.dup(fd)
            os.close(fd)
            fd = nfd
    # Whatever the problem's code prints goes to the log, never to a
    # channel someone reads as protocol.
    try:
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    except OSError:
        pass
    log("started, pid %d, %s, Python %s" % (os.getpid(), "fd %d" % fd if a.listen is None else
                                             "socket %s" % a.listen, sys.version.split()[0]))
    try:
        if a.listen is not None:
            rc = listen(a.listen, max(1, a.idle_s), _serve_warm(State()))
        else:
            rc = serve(fd)
    except KeyboardInterrupt:
        rc = 130
    sys.stderr.flush()
    os._exit(0 if rc == 0 else 1)  # no atexit or CUDA teardown: the child may already be gone


if __name__ == "__main__":
    main()
