// One block of 128 threads per row; each thread keeps 32 values (eight
// float4) in registers. Max and sum come from one online pass
// (running max with rescaled sum), so the block reduces once, not twice.
/* -inf without math.h, which NVRTC does not provide. */
#define NEG_INF __int_as_float(0xff800000)

#define THREADS 128
#define VEC 8 /* 128 threads * 8 float4 * 4 = 4096 columns */

extern "C" __global__ void __launch_bounds__(THREADS)
softmax_online(const float4 *__restrict__ x, float4 *__restrict__ y, int rows,
               int cols)
{
	__shared__ float red_m[THREADS / 32], red_s[THREADS / 32];
	int r = blockIdx.x;
	if (r >= rows || cols != THREADS * VEC * 4)
		return;
	const float4 *in = x + (long long)r * (cols / 4);
	float4 *out = y + (long long)r * (cols / 4);
	float4 v[VEC];
	float m = NEG_INF;
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		v[k] = __ldcs(&in[threadIdx.x + k * THREADS]);
		m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
	}
	float s = 0.0f;
#pragma unroll
	for (int k = 0; k < VEC; k++)
		s += (expf(v[k].x - m) + expf(v[k].y - m)) +
		     (expf(v[k].z - m) + expf(v[k].w - m));
	/* Combine (max, sum) pairs: the sum rescales to the larger max. */
	for (int o = 16; o > 0; o >>= 1) {
		float om = __shfl_xor_sync(0xffffffffu, m, o);
		float os = __shfl_xor_sync(0xffffffffu, s, o);
		float nm = fmaxf(m, om);
		s = s * expf(m - nm) + os * expf(om - nm);
		m = nm;
	}
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	if (lane == 0) {
		red_m[warp] = m;
		red_s[warp] = s;
	}
	__syncthreads();
	float gm = red_m[0];
	for (int w = 1; w < THREADS / 32; w++)
		gm = fmaxf(gm, red_m[w]);
	float gs = 0.0f;
	for (int w = 0; w < THREADS / 32; w++)
		gs += red_s[w] * expf(red_m[w] - gm);
	float inv = 1.0f / gs;
#pragma unroll
	for (int k = 0; k < VEC; k++) {
		float4 o = {expf(v[k].x - gm) * inv, expf(v[k].y - gm) * inv,
		            expf(v[k].z - gm) * inv, expf(v[k].w - gm) * inv};
		__stcs(&out[threadIdx.x + k * THREADS], o);
	}
}
