#!/usr/bin/env python3
"""Bandwidth probes on a 6.4 GB buffer (GPU, CuPy): the byte memset the
sandbox poisons outputs with (cuMemsetD8Async's runtime twin), a kernel of
16-byte stores, the sandbox's input hash as it was before 5915a79
(two mixes per word, 8-byte loads), with 16-byte loads, and with one mix
per word (kc_hash since 5915a79), each at three grids; a device copy.
Median of 8 after one untimed run, docs/benchmarks.md.

    python3 tools/bench/bandwidth_probe.py
"""
import cupy as cp

KERNELS = r"""
typedef unsigned long long u64;
__device__ __forceinline__ u64 mix(u64 z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
extern "C" __global__ void poison16(unsigned char *p, u64 n, u64 *out) {
  uint4 v = make_uint4(~0u, ~0u, ~0u, ~0u);
  u64 q = n / 16, s = (u64)gridDim.x * blockDim.x;
  uint4 *w = (uint4 *)p;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < q; i += s) w[i] = v;
}
extern "C" __global__ void hash_shipped(const unsigned char *p, u64 n, u64 *out) {
  u64 acc = 0;
  u64 words = n / 8, s = (u64)gridDim.x * blockDim.x;
  const u64 *__restrict__ w = (const u64 *)p;
  u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x;
  for (; i + 3 * s < words; i += 4 * s) {
    u64 a = w[i], b = w[i + s], c = w[i + 2 * s], d = w[i + 3 * s];
    acc += mix(a ^ mix(i)) + mix(b ^ mix(i + s)) + mix(c ^ mix(i + 2 * s)) + mix(d ^ mix(i + 3 * s));
  }
  for (; i < words; i += s) acc += mix(w[i] ^ mix(i));
  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(~0u, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}
/* 16-byte loads, the same per-word function */
extern "C" __global__ void hash16(const unsigned char *p, u64 n, u64 *out) {
  u64 acc = 0;
  u64 q = n / 16, s = (u64)gridDim.x * blockDim.x;
  const ulonglong2 *__restrict__ w = (const ulonglong2 *)p;
  u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x;
  for (; i + s < q; i += 2 * s) {
    ulonglong2 a = w[i], b = w[i + s];
    acc += mix(a.x ^ mix(2 * i)) + mix(a.y ^ mix(2 * i + 1)) + mix(b.x ^ mix(2 * (i + s))) + mix(b.y ^ mix(2 * (i + s) + 1));
  }
  for (; i < q; i += s) { ulonglong2 a = w[i]; acc += mix(a.x ^ mix(2 * i)) + mix(a.y ^ mix(2 * i + 1)); }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(~0u, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}
/* 16-byte loads, one mix per word: the position enters by an odd multiply */
extern "C" __global__ void hash16_cheap(const unsigned char *p, u64 n, u64 *out) {
  u64 acc = 0;
  u64 q = n / 16, s = (u64)gridDim.x * blockDim.x;
  const ulonglong2 *__restrict__ w = (const ulonglong2 *)p;
  u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x;
  for (; i + s < q; i += 2 * s) {
    ulonglong2 a = w[i], b = w[i + s];
    u64 k = 2 * i * 0x9e3779b97f4a7c15ull, l = 2 * (i + s) * 0x9e3779b97f4a7c15ull;
    acc += mix(a.x ^ k) + mix(a.y ^ (k + 0x9e3779b97f4a7c15ull)) + mix(b.x ^ l) + mix(b.y ^ (l + 0x9e3779b97f4a7c15ull));
  }
  for (; i < q; i += s) { ulonglong2 a = w[i]; u64 k = 2 * i * 0x9e3779b97f4a7c15ull; acc += mix(a.x ^ k) + mix(a.y ^ (k + 0x9e3779b97f4a7c15ull)); }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(~0u, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}
"""

N = 1600 * 1024 * 1024  # floats: 6.4 GB


def timed(fn, reps=8):
    fn()
    cp.cuda.Device().synchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    ms = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        e.synchronize()
        ms.append(cp.cuda.get_elapsed_time(s, e))
    ms.sort()
    return ms[len(ms) // 2]


def main():
    a = cp.empty(N, dtype=cp.float32)
    b = cp.empty(N, dtype=cp.float32)
    mod = cp.RawModule(code=KERNELS, options=("-std=c++17",))
    nb = N * 4
    out = cp.zeros(1, dtype=cp.uint64)
    sm = cp.cuda.Device().attributes["MultiProcessorCount"]
    r = {"memsetD8": timed(lambda: cp.cuda.runtime.memsetAsync(a.data.ptr, 0xff, nb, 0))}
    for name in ("poison16", "hash_shipped", "hash16", "hash16_cheap"):
        k = mod.get_function(name)
        for blocks in (sm * 4, sm * 8, sm * 16):
            r["%s/%d" % (name, blocks)] = timed(
                lambda: k((blocks,), (256,), (a, cp.uint64(nb), out)))
    r["copy"] = timed(lambda: cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, nb, 3, 0))
    for k, v in r.items():
        print("%-22s %.3f ms  %.0f GB/s" % (k, v, nb / v / 1e6))


if __name__ == "__main__":
    main()
