// Two passes, no atomics, deterministic: each block writes its partial sum
// to scratch, then one block adds the partials.
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

extern "C" __global__ void partial_sums(const float4 *__restrict__ x,
                                        float *__restrict__ part, int n)
{
	int n4 = n / 4;
	float s = 0.0f;
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4;
	     i += gridDim.x * blockDim.x) {
		float4 v = x[i];
		s += (v.x + v.y) + (v.z + v.w);
	}
	s = block_sum(s);
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
