// One warp per row: coalesced loads, warp shuffles for max and sum.
/* -inf without math.h, which NVRTC does not provide. */
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
	return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	return v;
}

extern "C" __global__ void softmax_warp(const float *__restrict__ x,
                                        float *__restrict__ y, int rows,
                                        int cols)
{
	int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;
	if (warp >= rows)
		return;
	const float *in = x + (long long)warp * cols;
	float *out = y + (long long)warp * cols;
	float m = NEG_INF;
	for (int c = lane; c < cols; c += 32)
		m = fmaxf(m, in[c]);
	m = warp_max(m);
	float s = 0.0f;
	for (int c = lane; c < cols; c += 32)
		s += expf(in[c] - m);
	s = warp_sum(s);
	float inv = 1.0f / s;
	for (int c = lane; c < cols; c += 32)
		out[c] = expf(in[c] - m) * inv;
}
