"""torchref_cuda: the reference process's own CUDA (see torchref.py): the
driver called through ctypes, the shared arena exported by one CUDA IPC
handle, and the device kernels (the comparison, the norms and the
checksums), compiled with NVRTC at hello."""
import ctypes
import math
import os
import sys

from torchref_common import RefError, log, one_line, share_globals

torch = None  # PyTorch once imported (import_torch sets it here)
share_globals(globals())


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

/* The sandbox's rules for a floating element (verify.c, docs/torchref.md).
 * The two divisions (an element's score against its tolerance, its
 * relative error) are made only where the quotient could pass the largest
 * one so far, by a test with a margin for the products' rounding
 * (KC_NEAR), so the figures are the same as with both made everywhere; once
 * a block has seen its first errors, almost no element needs them, and
 * FP64 divisions were most of the comparison's time. */
#define KC_NEAR (1.0 - 1e-9)
__device__ __forceinline__ void kc_worst(kc_acc &a, double score, double g, double e, u64 i) {
  if (score > a.ws) { a.ws = score; a.wi = (double)i; a.we = e; a.wg = g; }
}
__device__ __forceinline__ void kc_elem_float(kc_acc &a, double g, double e, u64 i, double atol,
                                              double rtol) {
  bool gn = g != g, en = e != e;
  bool gi = !gn && kc_abs(g) == KC_INF, ei = !en && kc_abs(e) == KC_INF;
  bool both_nan = gn && en;
  bool special = (gn || en || gi != ei) && !both_nan;
  bool inf_bad = gi && ei && g != e;
  bool fin = !(gn || en || gi || ei);
  double ae = kc_abs(e), d = kc_abs(g - e), lim = atol + rtol * ae;
  a.bad += (special || inf_bad || (fin && d > lim)) ? 1 : 0;
  a.nan += (gn && !en) ? 1 : 0;
  if (fin) {
    a.err2 += d * d;
    a.exp2 += e * e;
    a.mabs = kc_max(a.mabs, d);
    if (e != 0 && d > a.mrel * ae * KC_NEAR) a.mrel = kc_max(a.mrel, d / ae);
    if (lim <= 0) kc_worst(a, d > 0 ? KC_INF : 0, g, e, i);
    else if (d > a.ws * lim * KC_NEAR) kc_worst(a, d / lim, g, e, i);
  } else {
    double bad_score = (special || inf_bad) ? KC_INF : 0;
    a.mabs = kc_max(a.mabs, bad_score);
    kc_worst(a, both_nan ? -1 : bad_score, g, e, i);
  }
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
    u64 s = (u64)gridDim.x * blockDim.x, i = blockIdx.x * (u64)blockDim.x + threadIdx.x;  \
    /* Four elements' loads in flight, taken in the grid-stride order. */            \
    for (; i + 3 * s < n; i += 4 * s) {                                              \
      double g0 = kc_ld(g, i), e0 = kc_ld(e, i), g1 = kc_ld(g, i + s),               \
             e1 = kc_ld(e, i + s), g2 = kc_ld(g, i + 2 * s), e2 = kc_ld(e, i + 2 * s), \
             g3 = kc_ld(g, i + 3 * s), e3 = kc_ld(e, i + 3 * s);                     \
      kc_elem_float(a, g0, e0, i, atol, rtol);                                       \
      kc_elem_float(a, g1, e1, i + s, atol, rtol);                                   \
      kc_elem_float(a, g2, e2, i + 2 * s, atol, rtol);                               \
      kc_elem_float(a, g3, e3, i + 3 * s, atol, rtol);                               \
    }                                                                                \
    for (; i < n; i += s)                                                            \
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

