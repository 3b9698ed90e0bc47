/* torch.mean((predictions - targets) ** 2) over 32768 x 32768 floats;
 * out is the 0-d result, declared [1]. Deterministic two passes, no
 * atomics: mse_part gives each block a fixed grid-stride share of the
 * float4s and reduces it in a fixed tree (in double across threads) into
 * part[blockIdx.x]; mse_final adds the partials in a fixed tree and
 * divides by the count. */
#define THREADS 256

__device__ __forceinline__ double
warp_sum(double v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	return v;
}

/* Sums v over the block (THREADS threads); the result is in thread 0. */
__device__ __forceinline__ double
block_sum(double v)
{
	__shared__ double sh[THREADS / 32];
	v = warp_sum(v);
	if ((threadIdx.x & 31) == 0)
		sh[threadIdx.x >> 5] = v;
	__syncthreads();
	double t = 0.0;
	if (threadIdx.x == 0)
		for (int w = 0; w < THREADS / 32; w++)
			t += sh[w];
	return t;
}

extern "C" __global__ void
__launch_bounds__(THREADS) mse_part(const float4 *__restrict__ p,
    const float4 *__restrict__ t, double *__restrict__ part, long long n4)
{
	long long stride = (long long)gridDim.x * THREADS;
	float a0 = 0.0f, a1 = 0.0f;
	for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
	     i < n4; i += stride) {
		float4 u = __ldcs(p + i), v = __ldcs(t + i);
		float d0 = u.x - v.x, d1 = u.y - v.y, d2 = u.z - v.z,
		      d3 = u.w - v.w;
		a0 = fmaf(d0, d0, fmaf(d1, d1, a0));
		a1 = fmaf(d2, d2, fmaf(d3, d3, a1));
	}
	double s = block_sum((double)a0 + (double)a1);
	if (threadIdx.x == 0)
		part[blockIdx.x] = s;
}

/* One block of THREADS threads; parts is a multiple of THREADS. */
extern "C" __global__ void
__launch_bounds__(THREADS) mse_final(const double *__restrict__ part,
    float *__restrict__ out, int parts, double count)
{
	double a = 0.0;
	for (int i = threadIdx.x; i < parts; i += THREADS)
		a += part[i];
	double s = block_sum(a);
	if (threadIdx.x == 0)
		out[0] = (float)(s / count);
}
