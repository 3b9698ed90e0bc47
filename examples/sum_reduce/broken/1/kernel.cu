// Grid-stride loop with float4 loads, warp-shuffle reduction, one float
// atomic per block into y.
extern "C" __global__ void sum_atomic(const float4 *__restrict__ x,
                                      float *__restrict__ y, int n)
{
	__shared__ float warp_part[32];
	int n4 = n / 4;
	float s = 0.0f;
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4;
	     i += gridDim.x * blockDim.x) {
		float4 v = x[i];
		s += (v.x + v.y) + (v.z + v.w);
	}
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	if (threadIdx.x % 32 == 0)
		warp_part[threadIdx.x / 32] = s;
	__syncthreads();
	if (threadIdx.x < 32) {
		s = threadIdx.x < blockDim.x / 32 ? warp_part[threadIdx.x] : 0.0f;
		for (int o = 16; o > 0; o >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, o);
		if (threadIdx.x == 0)
			atomicAdd(y, s);
	}
}
