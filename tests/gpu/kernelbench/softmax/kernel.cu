/* softmax(x, dim=1) over 4096 rows of 393216 floats: one block per row.
 * Pass 1 keeps an online (max, sum of exp(x - max)) per thread over
 * float4s, merged in a fixed order (warp shuffles, then shared memory), so
 * the result is bitwise deterministic; pass 2 writes exp(x - max) / sum.
 * Requires blockDim.x = 1024 and a row length that is a multiple of 4. */
#define THREADS 1024
#define WARPS (THREADS / 32)
#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ void
merge(float &m, float &s, float m2, float s2)
{
	float mm = fmaxf(m, m2);
	/* exp(-inf - -inf) would be NaN: an empty side contributes 0. */
	float a = m == NEG_INF ? 0.0f : s * __expf(m - mm);
	float b = m2 == NEG_INF ? 0.0f : s2 * __expf(m2 - mm);
	m = mm;
	s = a + b;
}

extern "C" __global__ void
__launch_bounds__(THREADS)
    softmax_rows(const float *__restrict__ x, float *__restrict__ y, int d4)
{
	__shared__ float sm[WARPS], ss[WARPS];
	__shared__ float row_max, row_inv;
	const long long base = (long long)blockIdx.x * d4;
	const float4 *xr = reinterpret_cast<const float4 *>(x) + base;
	float4 *yr = reinterpret_cast<float4 *>(y) + base;

	float m = NEG_INF, s = 0.0f;
	for (int i = threadIdx.x; i < d4; i += THREADS) {
		float4 v = xr[i];
		float lm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
		if (lm > m) {
			s = m == NEG_INF ? 0.0f : s * __expf(m - lm);
			m = lm;
		}
		s += __expf(v.x - m) + __expf(v.y - m) + __expf(v.z - m) +
		    __expf(v.w - m);
	}
	for (int o = 16; o > 0; o >>= 1) {
		float m2 = __shfl_xor_sync(0xffffffffu, m, o);
		float s2 = __shfl_xor_sync(0xffffffffu, s, o);
		merge(m, s, m2, s2);
	}
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0) {
		sm[warp] = m;
		ss[warp] = s;
	}
	__syncthreads();
	if (warp == 0) {
		m = sm[lane];
		s = ss[lane];
		for (int o = 16; o > 0; o >>= 1) {
			float m2 = __shfl_xor_sync(0xffffffffu, m, o);
			float s2 = __shfl_xor_sync(0xffffffffu, s, o);
			merge(m, s, m2, s2);
		}
		if (lane == 0) {
			row_max = m;
			row_inv = 1.0f / s;
		}
	}
	__syncthreads();
	m = row_max;
	float inv = row_inv;
	for (int i = threadIdx.x; i < d4; i += THREADS) {
		float4 v = __ldcs(xr + i);
		v.x = __expf(v.x - m) * inv;
		v.y = __expf(v.y - m) * inv;
		v.z = __expf(v.z - m) * inv;
		v.w = __expf(v.w - m) * inv;
		__stcs(yr + i, v);
	}
}
