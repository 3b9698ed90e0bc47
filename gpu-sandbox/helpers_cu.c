/*
 * helpers_cu.c - the sandbox's own device code: input generators (one per
 * dtype), a position-aware buffer hash and an L2 flush. Compiled with NVRTC
 * like a candidate (and cached), loaded in the child's context.
 */
#include "sandbox.h"

/*
 * Generators are counter-based (splitmix64 of seed and index), so a tensor's
 * contents depend only on (seed, distribution, parameters), not on the grid.
 * Student-t uses Bailey's polar-free form: sqrt(v (u^(-2/v) - 1)) cos(2 pi w).
 */
const char sbx_helpers_cu[] =
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    "typedef unsigned long long u64;\n"
    "__device__ __forceinline__ u64 mix(u64 z) {\n"
    "  z += 0x9e3779b97f4a7c15ull;\n"
    "  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;\n"
    "  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;\n"
    "  return z ^ (z >> 31);\n"
    "}\n"
    "__device__ __forceinline__ double unit(u64 z) {\n"
    "  return ((z >> 11) + 0.5) * (1.0 / 9007199254740992.0);\n"
    "}\n"
    "__device__ double sample(u64 seed, u64 i, int dist, double a, double b,"
    " double c) {\n"
    "  u64 h1 = mix(seed ^ mix(2 * i)), h2 = mix(seed ^ mix(2 * i + 1));\n"
    "  double u = unit(h1), v = unit(h2);\n"
    "  switch (dist) {\n"
    "  case 1: return a + b * sqrt(-2.0 * log(u)) * cospi(2.0 * v);\n"
    "  case 2: return a + (b - a) * u;\n"
    "  case 3: return a + b * sqrt(c * (pow(u, -2.0 / c) - 1.0)) *"
    " cospi(2.0 * v);\n"
    "  case 4: return 0.0;\n"
    "  case 5: return 1.0;\n"
    "  case 6: return (double)i;\n"
    "  case 7: return floor(a + (b - a) * u);\n"
    "  default: return 0.0;\n"
    "  }\n"
    "}\n"
    "#define GEN(NAME, T, CONV) extern \"C\" __global__ void NAME(T *out,"
    " u64 n, u64 seed, int dist, double a, double b, double c) {\\\n"
    "  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;"
    " i += (u64)gridDim.x * blockDim.x)\\\n"
    "    out[i] = CONV(sample(seed, i, dist, a, b, c));\\\n"
    "}\n"
    "GEN(kc_gen_f32, float, (float))\n"
    "GEN(kc_gen_f64, double, (double))\n"
    "GEN(kc_gen_f16, __half, __double2half)\n"
    "GEN(kc_gen_bf16, __nv_bfloat16, __double2bfloat16)\n"
    "GEN(kc_gen_i32, int, (int)llrint)\n"
    "GEN(kc_gen_i64, long long, (long long)llrint)\n"
    "GEN(kc_gen_i8, signed char, (signed char)llrint)\n"
    "GEN(kc_gen_u8, unsigned char, (unsigned char)llrint)\n"
    "extern \"C\" __global__ void kc_hash(const unsigned char *p, u64 n,"
    " u64 *out) {\n"
    "  u64 acc = 0;\n"
    "  u64 words = n / 8;\n"
    "  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < words;"
    " i += (u64)gridDim.x * blockDim.x)\n"
    "    acc += mix(((const u64 *)p)[i] ^ mix(i));\n"
    "  if (blockIdx.x == 0 && threadIdx.x == 0)\n"
    "    for (u64 i = words * 8; i < n; i++) acc += mix(p[i] ^ mix(~i));\n"
    "  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(~0u, acc,"
    " o);\n"
    "  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);\n"
    "}\n";
