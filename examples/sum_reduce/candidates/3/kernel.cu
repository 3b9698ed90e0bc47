// Two passes like a tree, with more bytes in flight per thread: each
// iteration issues four independent 16-byte streaming loads into four
// separate accumulators before adding them.
#define UNROLL 4

__device__ __forceinline__ float block_sum(float s)
{
	__shared__ float warp_part[32];
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	if (threadIdx.x % 32 == 0)
		warp_part[threadIdx.x / 32] = s;
	__syncthreads();
	s = 0.0f;
	if (threadIdx.x < 32) {
		s = threadIdx.x < blockDim.x / 32 ? warp_part[threadIdx.x] : 0.0f;
		for (int o = 16; o > 0; o >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, o);
	}
	return s;
}

extern "C" __global__ void __launch_bounds__(512)
partial_sums_ilp(const float4 *__restrict__ x, float *__restrict__ part, int n)
{
	int n4 = n / 4;
	int stride = gridDim.x * blockDim.x;
	float acc[UNROLL] = {0.0f, 0.0f, 0.0f, 0.0f};
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
		float4 v[UNROLL];
#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			v[u] = __ldcs(&x[i + u * stride]);
#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			acc[u] += (v[u].x + v[u].y) + (v[u].z + v[u].w);
	}
	for (; i < n4; i += stride) {
		float4 v = __ldcs(&x[i]);
		acc[0] += (v.x + v.y) + (v.z + v.w);
	}
	float s = block_sum((acc[0] + acc[1]) + (acc[2] + acc[3]));
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

extern "C" __global__ void final_sum(const float *__restrict__ part,
                                     float *__restrict__ y, int nparts)
{
	float s = 0.0f;
	for (int i = threadIdx.x; i < nparts; i += blockDim.x)
		s += part[i];
	s = block_sum(s);
	if (threadIdx.x == 0)
		*y = s;
}
