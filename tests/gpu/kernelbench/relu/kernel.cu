/* y = max(x, 0) over 4096 x 393216 floats (1.6G elements, 6.4 GB): float4
 * loads and stores with streaming hints, a grid-stride loop with 64-bit
 * indices. n4 is the number of float4s (the element count is a multiple
 * of 4). */
extern "C" __global__ void
relu4(const float4 *__restrict__ x, float4 *__restrict__ y, long long n4)
{
	long long stride = (long long)gridDim.x * blockDim.x;
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	     i < n4; i += stride) {
		float4 v = __ldcs(x + i);
		v.x = fmaxf(v.x, 0.0f);
		v.y = fmaxf(v.y, 0.0f);
		v.z = fmaxf(v.z, 0.0f);
		v.w = fmaxf(v.w, 0.0f);
		__stcs(y + i, v);
	}
}
